/* Running a bucket plan (plan.h, format 5) at an actual shape, without a
 * GPU: which bucket, and the host-side padding of inputs and slicing of
 * outputs. The GPU session (runtime/gpu/buckets.c) and the tests use these.
 *   int64_t actual[GPUC_PLAN_MAX_AXES];
 *   gpuc_bucket_actual(p, n, names, inputs, actual, e);   // axis sizes, range checks
 *   int b = gpuc_bucket_select(p, actual, e);              // smallest bucket holding them
 *   Tensor *x = gpuc_bucket_pad(p, name, input, p->buckets[b].size, e);
 *   ... run bucket b ...
 *   Tensor *y = gpuc_bucket_slice(p, out_name, bucket_output, actual, e); */
#ifndef GPUC_BUCKETS_H
#define GPUC_BUCKETS_H
#include "plan.h"

/* The axis sizes the given inputs have (all of the plan's inputs, by name):
 * each input's dtype and rank as compiled, its fixed dims as compiled, its
 * ranged dims within the range (else a message naming it) and equal where
 * two inputs share an axis. */
int gpuc_bucket_actual(const Plan *p, uint32_t n, const char *const *names, const Tensor *const *inputs,
                       int64_t actual[GPUC_PLAN_MAX_AXES], GpucErr *e);
/* The smallest bucket (fewest elements over its axes) that holds `actual`,
 * where an axis that cannot be padded (PlanAxis.flags 0) must match a
 * bucket's size exactly; -1 with a message if none. */
int gpuc_bucket_select(const Plan *p, const int64_t actual[GPUC_PLAN_MAX_AXES], GpucErr *e);
/* The axis input/output `name`'s dim d follows, -1 for a fixed dim. */
int gpuc_bucket_axis_of(const Plan *p, const char *name, bool output, int d);
/* Input or output `name`'s dims when the axes have `sizes`; rank or -1. */
int gpuc_bucket_io_dims(const Plan *p, const char *name, bool output, const int64_t sizes[GPUC_PLAN_MAX_AXES],
                        int64_t dims[GPUC_MAX_RANK]);
/* Input x padded to the bucket's sizes: batch axes by repeating the last
 * row, other axes with zeros (an attention mask's zeros hide them). */
Tensor *gpuc_bucket_pad(const Plan *p, const char *name, const Tensor *x, const int64_t sizes[GPUC_PLAN_MAX_AXES],
                        GpucErr *e);
/* A bucket's output y cut to the actual sizes. */
Tensor *gpuc_bucket_slice(const Plan *p, const char *name, const Tensor *y, const int64_t actual[GPUC_PLAN_MAX_AXES],
                          GpucErr *e);
/* Padding and slicing as strided copies, for any memory: the host's
 * (gpuc_bucket_pad/slice) and the C API's device copies
 * (runtime/api_buckets.c) walk the same corner. A tensor of src_dims is
 * copied into dst_dims (each dim larger, smaller or equal): the leading
 * corner both share is copied, and past src's end a dim with repeat[d]
 * repeats src's last index there, else it is zero. fn gets each copy in
 * order (a later one may read what an earlier one wrote: FROM_DST); the
 * walk stops at the first nonzero return and returns it. A copy is `rows`
 * rows of `width` bytes, the rows pitch apart; offsets are in bytes from
 * the tensors' starts. The count is about the product of the dims above
 * the innermost one that differs (one copy for a padded leading batch,
 * plus log2 of the padding for its repeated rows). */
enum { GPUC_BUCKET_FROM_SRC = 0, GPUC_BUCKET_FROM_DST = 1, GPUC_BUCKET_ZERO = 2 };
typedef struct GpucBucketCopy {
  int kind;                      /* GPUC_BUCKET_*: from src, from dst itself, or zeros (src unused) */
  uint64_t dst_off, src_off, dst_pitch, src_pitch, width, rows;
} GpucBucketCopy;
typedef int (*GpucBucketCopyFn)(void *ctx, const GpucBucketCopy *c);
int gpuc_bucket_copies(int rank, const int64_t *src_dims, const int64_t *dst_dims, const bool *repeat, size_t es,
                       GpucBucketCopyFn fn, void *ctx);
/* Which dims of input/output `name` repeat when padded (batch axes). */
void gpuc_bucket_repeat_dims(const Plan *p, const char *name, bool output, int rank, bool rep[GPUC_MAX_RANK]);
/* The arena a session of p needs: the largest bucket's. */
uint64_t gpuc_bucket_arena_bytes(const Plan *p);
#endif
