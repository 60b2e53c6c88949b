#!/usr/bin/env bash
# Long-sequence attention on the GPU machine (issue 11), from the repo root,
# with a carried Release gpuc ($GPUC, default build-gpu/gpuc):
#  1. tests/gpu/longattn_kernels.py: the streaming kernels
#     (codegen/lower_attention_stream.c) directly, at S = 128, 1500 and
#     4096, with no mask, a padding mask, causal, causal + grouped-query
#     heads and a [1,H,S,S] bias, fp32 and fp16, against `gpuc run --cpu`
#     and PyTorch float64, timed beside PyTorch's SDPA fp16 and (fp16
#     without causal/GQA) the tiled kernel they replace past S 128;
#  2. bench/zoo.py on Whisper-base's encoder (80x3000 features, S 1500),
#     the T5-small encoder (relative-position bias) and the LLaMA-style
#     decoder (GQA + causal), TorchScript exporter (and dynamo for LLaMA:
#     PyTorch's dynamo export fails on T5 with a dynamic batch and writes
#     Whisper's GELU as Gelu-20), batch 1 and 32, fp32 (rel L2 <= 1e-4)
#     and fp16 (max(2e-2, 2x PyTorch fp16's own error)) against PyTorch
#     fp32, timed beside torch.compile(mode="reduce-overhead") fp16.
# One PASS/FAIL line per case; logs and the zoo tables in $OUT. About 5
# minutes (LONGATTN_BUDGET seconds, default 230, bounds the zoo runs).
# usage: GPUC=build-gpu/gpuc tests/gpu/longattn_check.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
GPUC=${GPUC:-$PWD/build-gpu/gpuc}
log="$OUT/longattn_log.txt"
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $GPUC --version) 2>&1 | tee "$log"
timeout 150 $PY tests/gpu/longattn_kernels.py --gpuc "$GPUC" --out "$OUT" --work /tmp/gpuc_longattn 2>&1 |
  grep -v -i warning | tee -a "$log"
k_rc=${PIPESTATUS[0]}
budget=${LONGATTN_BUDGET:-230}
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT/zoo_ts" --work /tmp/gpuc_longattn_zoo \
    --models whisper_base_encoder,llama_small,t5_small_encoder --exporters ts --batches 1,32 --opts=-O2 \
    --precisions fp32,fp16 --budget $((budget * 3 / 4)) --timeout-per-model 120 >>"$log" 2>&1
$PY bench/zoo.py --gpuc "$GPUC" --out "$OUT/zoo_dynamo" --work /tmp/gpuc_longattn_zoo \
    --models llama_small --exporters dynamo --batches 1,32 --opts=-O2 \
    --precisions fp32,fp16 --budget $((budget / 4)) --timeout-per-model 60 >>"$log" 2>&1
$PY - "$OUT/zoo_ts/zoo.jsonl" "$OUT/zoo_dynamo/zoo.jsonl" <<'PYEOF' 2>&1 | tee -a "$log"
import json, os, sys
rows = [json.loads(l) for p in sys.argv[1:] if os.path.exists(p) for l in open(p)]
want = [(m, "ts", b) for m in ("whisper_base_encoder", "t5_small_encoder", "llama_small") for b in (1, 32)]
want += [("llama_small", "dynamo", b) for b in (1, 32)]
seen = {(r["model"], r["exporter"], r["batch"]): r for r in rows}
bad = 0
for key in want:
    r = seen.get(key) or {}
    for prec in ("fp32", "fp16"):
        name = "%s %s b%d %s" % (key + (prec,))
        c = r.get("-O2_" + prec) or {}
        if not c.get("ok") or "rel_l2" not in c:
            bad += 1
            why = r.get("export_error") or c.get("error") or c.get("run_error") or "no result (time limit?)"
            print("FAIL %s: %s" % (name, why))
            continue
        ms, cms = c.get("ms"), r.get("compile_fp16_ms")
        ok = bool(c.get("pass")) and bool(ms)
        bad += not ok
        speed = ("gpuc %.3f ms, torch.compile fp16 %.3f ms (%.2fx)" % (ms, cms, cms / ms) if ms and cms else
                 "gpuc %s ms, torch.compile %s" % (ms, r.get("compile_error", cms)))
        print("%s %s: rel L2 %.2e (limit %.2e); %s" % ("PASS" if ok else "FAIL", name, c["rel_l2"], c["limit"], speed))
print("longattn_check zoo: %d of %d rows failed" % (bad, 2 * len(want)))
sys.exit(1 if bad else 0)
PYEOF
z_rc=${PIPESTATUS[0]}
[ "$k_rc" = 0 ] && [ "$z_rc" = 0 ] && echo "longattn_check: PASS" || echo "longattn_check: FAIL"
[ "$k_rc" = 0 ] && [ "$z_rc" = 0 ]
