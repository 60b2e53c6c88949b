/* Bucket plans (plan.h, format 5): the buckets' plans share one weights
 * blob, each weight stored once by content, and become one container plan.
 *   SharedWeights w = {0};
 *   for each bucket, as compiled: gpuc_shared_weights_add(&w, plan_i, e);
 *   gpuc_plan_buckets_build(&w, plans, n, &spec, &container, e);
 * Weights that differ between buckets (constants folded at a bucket's
 * shape) are stored once per distinct content. */
#ifndef GPUC_PLAN_BUCKETS_H
#define GPUC_PLAN_BUCKETS_H
#include "plan.h"

typedef struct SharedWeights {
  uint8_t *data;
  uint64_t size, cap;
  struct SharedWeight *ent;      /* one per distinct weight */
  uint32_t n, ncap;
  uint64_t added_bytes;          /* weight bytes the plans brought */
  uint64_t deduped_bytes;        /* of them found already stored */
} SharedWeights;

/* Move p's weights into w (a weight equal byte for byte to a stored one,
 * or to the leading bytes of one, takes its offset; others are appended,
 * 256-aligned; add the largest bucket first) and rewrite p's
 * weight tensor offsets; p keeps no weights of its own (weights NULL,
 * weights_size 0) until gpuc_plan_buckets_build lends it w's. */
int gpuc_shared_weights_add(SharedWeights *w, Plan *p, GpucErr *e);
void gpuc_shared_weights_free(SharedWeights *w);

/* What the compiler decided about the ranges (tools/compile_buckets.c). */
typedef struct BucketSpec {
  uint32_t naxes, nbuckets;
  const char *axis_name[GPUC_PLAN_MAX_AXES];
  PlanAxis axes[GPUC_PLAN_MAX_AXES];           /* name filled in by the build */
  const int64_t (*sizes)[GPUC_PLAN_MAX_AXES];  /* [nbuckets]; the last all at hi */
  uint32_t nuses;
  const char **use_name;                       /* [nuses] */
  PlanDimUse *uses;                            /* [nuses]; name filled in by the build */
} BucketSpec;

/* plans[n] (every one passed through w, the last the largest bucket)
 * become one plan in *out: plans[n-1] with w's data as its weights, the
 * bucket tables of spec, and the others as its buckets' plans. Owns the
 * plans and w's data from here, also on failure; the result is checked as
 * the reader checks a file (by a write and read in memory is not needed:
 * the caller writes it and tests read it back). */
int gpuc_plan_buckets_build(SharedWeights *w, Plan **plans, uint32_t n, const BucketSpec *spec, Plan **out,
                            GpucErr *e);
#endif
