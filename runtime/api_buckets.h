/* The C API's bucket plans (runtime/api_buckets.c): what a session of a
 * plan compiled for shape ranges keeps beside runtime/api_runtime.c's
 * session, and the hooks api_runtime.c calls. Not installed.
 *
 * A run of a bucket plan takes the dims the inputs were bound with, picks
 * the smallest bucket that holds them (runtime/buckets.c, the rule `gpuc
 * run` uses), copies each input padded into that bucket's buffers, replays
 * the bucket's CUDA graph and copies each bound output sliced back to the
 * actual shape, all on the run's stream as strided copies
 * (gpuc_bucket_copies): bindings are always copied, never used in place. */
#ifndef GPUC_API_BUCKETS_H
#define GPUC_API_BUCKETS_H
#include "api_internal.h"
#include "session.h"

typedef struct ApiBuckets ApiBuckets;

/* The shape of one run: the bucket, and each axis's actual size (an
 * output's dims follow: gpuc_bucket_io_dims). */
typedef struct ApiRunShape {
  int bucket;
  int64_t actual[GPUC_PLAN_MAX_AXES];
} ApiRunShape;
/* The bucket and axis sizes for inputs of dims in_dims[i] (plan input
 * order; in_rank[i] their ranks, dtypes as compiled), or a status with the
 * message set (GPUC_ERR_MISMATCH: a dim outside its range, the range
 * named; inputs disagreeing on an axis; a dim that is not paddable and no
 * bucket's size). The rule of gpuc_plan_resolve and of every run. */
gpuc_status api_bucket_shape(const gpuc_plan *plan, const int *in_rank, const int64_t (*in_dims)[GPUC_MAX_RANK],
                             ApiRunShape *out);

/* A session's state for a bucket plan (view->p->nbuckets > 0), or NULL
 * when out of memory. g: the session's GPU session (its buckets' sessions
 * share its stream, arena and weights). */
ApiBuckets *api_buckets_new(const gpuc_plan *view, GpucSession *g);
void api_buckets_free(ApiBuckets *b);
/* gpuc_session_bind_input/output on a bucket plan: the dims checked
 * against the ranges (an input: within every range, fixed dims as
 * compiled; an output: a shape it can have), the binding recorded.
 * Returns the input's/output's index, or -1 with *st set. */
int api_buckets_bind(ApiBuckets *b, gpuc_io io, const char *name, const void *data, gpuc_memory mem,
                     gpuc_dtype dtype, int ndim, const int64_t *dims, const char *fn, gpuc_status *st);
void api_buckets_unbind_all(ApiBuckets *b);
/* One run on stream cs (a CUstream; the context current; every input
 * bound): the bucket chosen, inputs padded in, its graph, bound outputs
 * sliced out. Nothing is enqueued when the shapes are refused. */
gpuc_status api_buckets_enqueue(ApiBuckets *b, void *cs);
/* Output k of the last run, sliced, into host memory (size: its bytes at
 * the last run's shape). The caller waited for the run. */
gpuc_status api_buckets_fetch(ApiBuckets *b, uint32_t k, void *data, size_t size);
/* The bad data the buckets' kernels found (runtime/device_fault.h): -1
 * with the message, else 0. */
int api_buckets_check(ApiBuckets *b, GpucErr *e);
/* The session gpuc_session_benchmark times: the last run's bucket (the
 * largest before any run), its graph captured. NULL with *st set. */
GpucSession *api_buckets_bench_session(ApiBuckets *b, gpuc_status *st);
/* gpuc_session_output_dims: the dims of output `name` for the inputs bound
 * now (all of them), else of the last run. */
gpuc_status api_buckets_output_dims(ApiBuckets *b, uint32_t k, int *ndim, int64_t *dims);
#endif
