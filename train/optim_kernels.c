/* CUDA C of the GPU trainer's own kernels (compiled by NVRTC when the GPU
 * trainer starts; tests/unit/test_optim_gpu.c compiles it for every arch in
 * CI). They work on all updated tensors at once: a table of OptTensor
 * entries in device memory and a list of chunks (tensor, first element),
 * one block per chunk, so one launch serves every parameter however many
 * there are.
 *
 * The step's scalars live on the device (OptScalars) so a step queues
 * without waiting for the host: the loss scale, the "non-finite gradient
 * seen" flag, the clean-step count, skipped steps, optimizer steps done
 * (AdamW's t) and the loss sum the progress line reads.
 *
 * The update formulas are train/optim.c's (PyTorch's SGD and AdamW); the
 * gradient each uses is g * gmul / scale: gmul = 1/accum, scale = the AMP
 * loss scale (1 without --amp). */
#include "train_gpu_src.h"

#define OPTIM_KERNELS_BODY \
         "typedef long long i64;\n" \
         "#define CHUNK " GPUC_STR(GPUC_OPT_CHUNK) "\n" \
         "struct OptTensor {\n" \
         "  float *p;          /* fp32 parameter: the plan's own, or the master copy */\n" \
         "  half_t *p16;       /* the half copy an --amp plan reads, or null */\n" \
         "  float *s0, *s1;    /* optimizer state: SGD velocity; AdamW m, v */\n" \
         "  const float *g;    /* this micro-batch's gradient (a plan output) */\n" \
         "  float *acc;        /* gradient sum over micro-batches (--accum > 1), or null */\n" \
         "  const float *mask; /* --prune: 1 kept, 0 pruned (stays zero), or null */\n" \
         "  i64 n;\n" \
         "};\n" \
         "/* scalars: see OptScalars in train_gpu_src.h */\n" \
         "enum { SC_SCALE, SC_FOUND, SC_CLEAN, SC_SKIPPED, SC_T, SC_LOSS_SUM, SC_LOSS_N };\n" \
         "#define CHUNK_RANGE(T, ct, co, x, i0, end)                        \\\n" \
         "  const OptTensor &x = T[ct[blockIdx.x]];                          \\\n" \
         "  i64 i0 = co[blockIdx.x], end = i0 + CHUNK < x.n ? i0 + CHUNK : x.n;\n" \
         "\n" \
         "/* acc = g (first micro-batch) or acc + g */\n" \
         "extern \"C\" __global__ void gpuc_grad_acc(const OptTensor *T, const int *ct, const i64 *co, int first) {\n" \
         "  CHUNK_RANGE(T, ct, co, x, i0, end)\n" \
         "  for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x)\n" \
         "    x.acc[i] = first ? x.g[i] : x.acc[i] + x.g[i];\n" \
         "}\n" \
         "\n" \
         "/* --amp: any inf/NaN in the (summed) gradients sets SC_FOUND */\n" \
         "extern \"C\" __global__ void gpuc_grad_check(const OptTensor *T, const int *ct, const i64 *co, int use_acc,\n" \
         "                                           float *sc) {\n" \
         "  CHUNK_RANGE(T, ct, co, x, i0, end)\n" \
         "  bool bad = false;\n" \
         "  for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x) {\n" \
         "    float v = use_acc ? x.acc[i] : x.g[i];\n" \
         "    bad |= !isfinite(v);\n" \
         "  }\n" \
         "  if (__syncthreads_or(bad) && threadIdx.x == 0) sc[SC_FOUND] = 1.0f;\n" \
         "}\n" \
         "\n" \
         "__device__ __forceinline__ void put(const OptTensor &x, i64 i, float p) {\n" \
         "  if (x.mask) p *= x.mask[i];\n" \
         "  x.p[i] = p;\n" \
         "  if (x.p16) x.p16[i] = to_half(p);\n" \
         "}\n" \
         "\n" \
         "/* SGD with momentum: v = m v + (g + wd p); p -= lr v */\n" \
         "extern \"C\" __global__ void gpuc_sgd(const OptTensor *T, const int *ct, const i64 *co, int use_acc,\n" \
         "                                    float gmul, const float *sc, float lr, float mom, float wd) {\n" \
         "  if (sc[SC_FOUND] != 0.0f) return; /* skipped step (--amp) */\n" \
         "  CHUNK_RANGE(T, ct, co, x, i0, end)\n" \
         "  float k = gmul / sc[SC_SCALE];\n" \
         "  for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x) {\n" \
         "    float g = (use_acc ? x.acc[i] : x.g[i]) * k, p = x.p[i];\n" \
         "    float v = mom * x.s0[i] + (g + wd * p);\n" \
         "    x.s0[i] = v;\n" \
         "    put(x, i, p - lr * v);\n" \
         "  }\n" \
         "}\n" \
         "\n" \
         "/* AdamW, t = optimizer steps done + 1 (skipped steps do not count) */\n" \
         "extern \"C\" __global__ void gpuc_adamw(const OptTensor *T, const int *ct, const i64 *co, int use_acc,\n" \
         "                                      float gmul, const float *sc, float lr, float b1, float b2,\n" \
         "                                      float eps, float wd) {\n" \
         "  if (sc[SC_FOUND] != 0.0f) return;\n" \
         "  CHUNK_RANGE(T, ct, co, x, i0, end)\n" \
         "  float k = gmul / sc[SC_SCALE], t = sc[SC_T] + 1.0f;\n" \
         "  float bc1 = 1.0f - powf(b1, t), bc2 = sqrtf(1.0f - powf(b2, t));\n" \
         "  for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x) {\n" \
         "    float g = (use_acc ? x.acc[i] : x.g[i]) * k, p = x.p[i] * (1.0f - lr * wd);\n" \
         "    float m = b1 * x.s0[i] + (1.0f - b1) * g, v = b2 * x.s1[i] + (1.0f - b2) * g * g;\n" \
         "    x.s0[i] = m;\n" \
         "    x.s1[i] = v;\n" \
         "    put(x, i, p - (lr / bc1) * m / (sqrtf(v) / bc2 + eps));\n" \
         "  }\n" \
         "}\n" \
         "\n" \
         "/* After the optimizer: the dynamic loss scale (halved and the step\n" \
         " * counted as skipped on a non-finite gradient, doubled after `growth`\n" \
         " * clean steps in a row, up to max_scale) and AdamW's step count. One\n" \
         " * thread. */\n" \
         "extern \"C\" __global__ void gpuc_scale_update(float *sc, int dynamic, float growth, float max_scale) {\n" \
         "  if (sc[SC_FOUND] != 0.0f) {\n" \
         "    sc[SC_SKIPPED] += 1.0f;\n" \
         "    sc[SC_CLEAN] = 0.0f;\n" \
         "    if (dynamic && sc[SC_SCALE] > 1.0f) sc[SC_SCALE] *= 0.5f;\n" \
         "  } else {\n" \
         "    sc[SC_T] += 1.0f;\n" \
         "    if (dynamic && (sc[SC_CLEAN] += 1.0f) >= growth) {\n" \
         "      if (sc[SC_SCALE] < max_scale) sc[SC_SCALE] *= 2.0f;\n" \
         "      sc[SC_CLEAN] = 0.0f;\n" \
         "    }\n" \
         "  }\n" \
         "  sc[SC_FOUND] = 0.0f;\n" \
         "}\n" \
         "\n" \
         "/* the micro-batch's loss into the running sum; the loss scale into the\n" \
         " * backward's seed (d loss / d loss) for the next micro-batch */\n" \
         "extern \"C\" __global__ void gpuc_loss_acc(const float *loss, float *sc) {\n" \
         "  sc[SC_LOSS_SUM] += *loss;\n" \
         "  sc[SC_LOSS_N] += 1.0f;\n" \
         "}\n" \
         "extern \"C\" __global__ void gpuc_seed(const float *sc, float *seed) { *seed = sc[SC_SCALE]; }\n"

/* The half copies are __half (--amp, --amp fp16) or __nv_bfloat16 (--amp
 * bf16); the rest is the same. */
const char *gpuc_optim_kernels_src(bool bf16) {
  return bf16 ? "#include <cuda_bf16.h>\n"
                "typedef __nv_bfloat16 half_t;\n"
                "#define to_half __float2bfloat16_rn\n" OPTIM_KERNELS_BODY
              : "#include <cuda_fp16.h>\n"
                "typedef __half half_t;\n"
                "#define to_half __float2half_rn\n" OPTIM_KERNELS_BODY;
}
