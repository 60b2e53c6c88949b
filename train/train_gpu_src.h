/* What the GPU trainer's kernels (optim_kernels.c) and their host side
 * (train_gpu.c) agree on: the table entry layout, the chunk size and the
 * device scalars. */
#ifndef GPUC_TRAIN_GPU_SRC_H
#define GPUC_TRAIN_GPU_SRC_H
#include <stdbool.h>
#include <stdint.h>

#define GPUC_STR2(x) #x
#define GPUC_STR(x) GPUC_STR2(x)
#define GPUC_OPT_CHUNK 8192      /* elements per block of the table kernels */
#define GPUC_OPT_THREADS 256

/* One updated tensor; device addresses (the CUDA struct OptTensor). */
typedef struct OptTensor {
  uint64_t p, p16, s0, s1, g, acc;
  uint64_t mask;                 /* --prune: floats 1/0, or 0 */
  int64_t n;
} OptTensor;

/* The device scalars, floats in this order. */
enum { SC_SCALE, SC_FOUND, SC_CLEAN, SC_SKIPPED, SC_T, SC_LOSS_SUM, SC_LOSS_N, SC_COUNT };

/* bf16: the half copies (p16) are bfloat16, else float16 */
const char *gpuc_optim_kernels_src(bool bf16);
#endif
