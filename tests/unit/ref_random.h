/* Seeded random inputs for the reference executor and the relative L2
 * error the precision tests compare by. Define TEST_RNG_SEED before the
 * include to give a test its own stream (default 7). Include after check.h
 * and ref.h. */
#ifndef GPUC_TEST_REF_RANDOM_H
#define GPUC_TEST_REF_RANDOM_H
#include <math.h>
#include <stdlib.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 7
#endif
static uint64_t rng = TEST_RNG_SEED;
static inline double urand(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2 - 1;
}

/* One tensor per input of g, shaped as declared, filled with urand()
 * (never all zeros); NULL-terminated, free with free_inputs. */
static inline Tensor **random_inputs(const Graph *g) {
  Tensor **ins = calloc((size_t)g->ninputs + 1, sizeof *ins);
  GPUC_ASSERT(ins);
  GpucErr e;
  for (int k = 0; k < g->ninputs; k++) {
    const Tensor *d = &g->values[g->inputs[k]].t;
    ins[k] = gpuc_tensor_new(d->dt, d->rank, d->dims, &e);
    GPUC_ASSERT(ins[k]);
    for (int64_t i = 0; i < gpuc_numel(d); i++) gpuc_set_f64(ins[k], i, urand());
  }
  return ins;
}
static inline void free_inputs(Tensor **ins) {
  for (int k = 0; ins && ins[k]; k++) gpuc_tensor_free(ins[k]);
  free(ins);
}

/* relative L2 of a against reference w: ||a - w|| / ||w|| (||a - w||
 * when w is all zeros) */
static inline double rel_l2(const Tensor *a, const Tensor *w) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpuc_numel(w); i++) {
    double d = gpuc_get_f64(a, i) - gpuc_get_f64(w, i);
    num += d * d;
    den += gpuc_get_f64(w, i) * gpuc_get_f64(w, i);
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}
#endif
