#!/usr/bin/env bash
# One device call: issue 12's 1.4x beside the 8-bit GEMM ceiling.
#   1. BERT-base b32 s128 and the LLaMA decoder b8 s512 (MODELS="bert llama"; also llama1b; tests/gpu/hf_export.py,
#      random seeded weights) compiled --fp16, --int8 --fp16 and --fp8 --fp16
#      (TAGS="fp16 int8 fp8" picks), each timed by
#      `gpuc bench --iters 200 --profile` (median; profile sums by step kind)
#   2. bench/int8_ceiling.py with those --fp16 medians: PyTorch's fp16, fp8 and
#      int8 GEMMs at the models' Linear shapes, and the ceiling of --int8 over
#      --fp16 if every Linear ran at the best 8-bit kernel and quantizing
#      were free (SKIP_CEILING=1: not this part)
# Carry: CARRY_DIR (default build-carry-i8) packed by tests/gpu/pack_carry.sh.
#   CARRY_DIR=build-carry-i8 bench/int8_ceiling.sh   (plans and bench outputs in WORK, default
#   /tmp/gpuc_ceiling; prints a line a plan, then the ceiling's)
set -u
cd "$(dirname "$0")/.." || exit 2
G=$PWD/${CARRY_DIR:-build-carry-i8}/gpuc
W=${WORK:-/tmp/gpuc_ceiling}; mkdir -p "$W"
PY=${PYTHON:-python3}
MODELS=${MODELS:-bert llama}
for m in $MODELS; do
  [ -f "$W/$m.onnx" ] || $PY -c "import sys; sys.path.insert(0, 'tests/gpu'); from hf_export import export; export('$m', '$W/$m.onnx')" &
done
wait
# seeded inputs (ids below 64, the mask's last quarter padding) for RUN_TAG's runs
$PY -c "
import numpy as np
for m, b, s in (('bert', 32, 128), ('llama', 8, 512), ('llama1b', 8, 512)):
    r = np.random.default_rng(2026); np.save('$W/%s_ids.npy' % m, r.integers(0, 64, (b, s)).astype(np.int64))
    k = np.ones((b, s), np.int64); k[:, s * 3 // 4:] = 0; np.save('$W/%s_mask.npy' % m, k)"
declare -A shape=([bert]="input_ids=32x128 attention_mask=32x128" [llama]="input_ids=8x512 attention_mask=8x512"
                 [llama1b]="input_ids=8x512 attention_mask=8x512")
fp16=""
for m in $MODELS; do
  sh=(); for s in ${shape[$m]}; do sh+=(--shape "$s"); done
  for tag in ${TAGS:-fp16 int8 fp8}; do
    flags=(--fp16); [ $tag = int8 ] && flags=(--int8 --fp16); [ $tag = fp8 ] && flags=(--fp8 --fp16)
    "$G" "$W/$m.onnx" --arch sm_90 "${flags[@]}" "${sh[@]}" -o "$W/${m}_$tag.gpuc" > "$W/${m}_$tag.compile.txt" 2>&1 ||
      { echo "FAIL $m $tag compile: $(tail -3 "$W/${m}_$tag.compile.txt")"; continue; }
    "$G" bench "$W/${m}_$tag.gpuc" --iters 200 --profile > "$W/${m}_$tag.txt" 2>&1
    ms=$(grep -o 'latency: median [0-9.]*' "$W/${m}_$tag.txt" | awk '{print $3}')
    # eager profile: ms summed by step kind (kernel / cublasLt / lt-int8 / lt-fp8), with gpuc's int8 GEMMs
    # (inspect's *_int8_gemm* kernels) and the QuantizeRows kernels of their own apart
    cls=$("$G" inspect "$W/${m}_$tag.gpuc" | awk '$2 == "kernel" && $3 ~ /int8_gemm/ { printf "%s=own-int8,", $1 }
                                               $2 == "kernel" && $3 ~ /_QuantizeRows(F8)?$/ { printf "%s=quantize-alone,", $1 }')
    sums=$(awk -v cls=",$cls" '$1 ~ /^[0-9]+$/ && NF > 3 { k = $2; i = index(cls, "," $1 "=");
                if (i) { r = substr(cls, i + length($1) + 2); k = substr(r, 1, index(r, ",") - 1) }
                s[k] += $3; n[k]++ }
                $1 == "total" { t = $2 } END { for (k in s) printf "%s %.3f ms (%d), ", k, s[k], n[k]; printf "eager total %.3f", t }' "$W/${m}_$tag.txt")
    echo "time $m $tag: median $ms ms; profile: $sums"
    [ $tag = fp16 ] && fp16="$fp16${fp16:+,}$m=$ms"
    # RUN_TAG=T: the plan's GPU output kept as $W/${m}_$tag.T.out (to compare two builds' plans)
    [ -n "${RUN_TAG:-}" ] && "$G" run "$W/${m}_$tag.gpuc" --input "input_ids=$W/${m}_ids.npy" \
      --input "attention_mask=$W/${m}_mask.npy" --out "$W/${m}_$tag.$RUN_TAG.out" > /dev/null 2>&1
  done
done
[ "${SKIP_CEILING:-0}" = 1 ] || $PY bench/int8_ceiling.py --fp16-ms "$fp16" --models "$(echo $MODELS | tr ' ' ,)"
