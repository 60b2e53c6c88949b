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
/* The arena a session of p needs: the largest bucket's. */
uint64_t gpuc_bucket_arena_bytes(const Plan *p);
#endif
