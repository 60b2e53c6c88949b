#!/usr/bin/env bash
# Issue 11's transformers on the GPU machine, from the repo root, with a
# carried Release gpuc ($GPUC, default build-gpu/gpuc): BERT-base, GPT-2 and
# ViT-B/16 (Hugging Face configs / torchvision, random weights, no
# downloads) exported with both PyTorch exporters (TorchScript opset 17,
# dynamo), compiled -O2 --fp16 at batch 1 and 32 (sequence 128), run on
# fresh random inputs and checked against PyTorch fp32 (rel L2 within
# max(2e-2, 2x PyTorch fp16's own error on the same input): bench/zoo.py's
# rule), and timed (gpuc bench, CUDA-graph replay) beside
# torch.compile(mode="reduce-overhead") fp16 in the same run. Prints one
# PASS/FAIL line per (model, exporter, batch) with both times; a plan slower
# than torch.compile gets its top profile steps in the log. Logs and the
# zoo table (zoo.md, zoo.jsonl) in $OUT. Then the before/after of
# passes/attention_views.c (tests/gpu/xformer_ab.py): each model's TorchScript
# export at batch 32 compiled again with GPUC_NO_ATTENTION_VIEWS=1, both
# plans' step counts, bytes moved and `gpuc bench` times, and the slowest
# steps of the new plan's profile ("AB ..." lines); and GPT-2's dynamo
# export at batch 32 with GPUC_NO_CAUSAL_MASK=1 the same way. About 6 minutes
# (XFORMER_BUDGET seconds, default 270, bounds the zoo run; the A/B
# XFORMER_AB_BUDGET, default 70, more).
# usage: GPUC=build-gpu/gpuc tests/gpu/xformer_check.sh [MODELS (comma list)]
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
models=${1:-bert_base,gpt2,vit_b_16}
log="$OUT/xformer_log.txt"
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_xformer --keep-work --models "$models" \
    --exporters ts,dynamo --batches 1,32 --opts=-O2 --precisions fp16 \
    --budget "${XFORMER_BUDGET:-270}" --timeout-per-model 200 2>&1 | tee -a "$log"
zoo_rc=${PIPESTATUS[0]}
# one line per row: correctness decides PASS/FAIL; the times say who is faster
$PY - "$OUT/zoo.jsonl" "$models" <<'PYEOF' 2>&1 | tee -a "$log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
want = [(m, ex, b) for m in sys.argv[2].split(",") for ex in ("ts", "dynamo") for b in (1, 32)]
seen = {(r["model"], r["exporter"], r["batch"]): r for r in rows}
bad = 0
for key in want:
    r = seen.get(key)
    name = "%s %s b%d" % key
    c = (r or {}).get("-O2_fp16") or {}
    if not r or not c.get("ok") or "rel_l2" not in c:
        bad += 1
        why = (r or {}).get("export_error") or c.get("error") or c.get("run_error") or "no result (time limit?)"
        print("FAIL %s: %s" % (name, why))
        continue
    ms, cms = c.get("ms"), r.get("compile_fp16_ms")
    ok = c.get("pass") and bool(ms)  # a plan that runs once but not under `gpuc bench` fails too
    bad += not ok
    speed = ("gpuc %.3f ms, torch.compile %.3f ms (%.2fx)" % (ms, cms, cms / ms) if ms and cms else
             "gpuc %s ms, torch.compile %s" % (ms, r.get("compile_error", cms)))
    print("%s %s: rel L2 %.2e (limit %.2e); %s" % ("PASS" if ok else "FAIL", name, c["rel_l2"], c["limit"], speed))
print("xformer_check: %d of %d rows failed" % (bad, len(want)))
sys.exit(1 if bad else 0)
PYEOF
rc=${PIPESTATUS[0]}
XFORMER_AB_BUDGET=${XFORMER_AB_BUDGET:-70} $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_xformer "$models" 32 2>&1 | tee -a "$log"
ab_rc=${PIPESTATUS[0]}
# GPT-2's dynamo export: its float-min causal mask as the attribute (passes/causal_mask.c) or not
if [[ ",$models," == *,gpt2,* ]]; then
  XFORMER_AB_BUDGET=${XFORMER_AB_BUDGET:-70} $PY tests/gpu/xformer_ab.py "$GPUC" /tmp/gpuc_xformer gpt2 32 dynamo \
      GPUC_NO_CAUSAL_MASK 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || ab_rc=1
fi
[ "$rc" = 0 ] || exit "$rc"
[ "$zoo_rc" = 0 ] || exit "$zoo_rc"
exit "$ab_rc"
