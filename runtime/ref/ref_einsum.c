/* Reference kernel of Einsum: a nested loop over every label (output labels
 * outside, summed labels inside), multiplying the addressed element of each
 * input and adding into the output element. Repeated labels in one input
 * (diagonals) simply add their axes' strides; broadcast axes of size 1 get
 * stride 0. Floats accumulate in double, integers in wrapping 64 bits. */
#include "ref_util.h"
#include "infer_linalg.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
  int nin, L;              /* inputs; labels in loop order */
  int64_t dim[GPUC_EINSUM_MAX_LABELS];
  int64_t *st;             /* [nin][L] input strides per label */
  int64_t ost[GPUC_EINSUM_MAX_LABELS]; /* output strides (0 for summed) */
} Loop;

/* Loop order: the output's labels, then the summed ones. */
static int loop_init(OpCtx *c, const GpucEinsum *es, const Tensor *y, Loop *lp) {
  int order[GPUC_EINSUM_MAX_LABELS], pos[GPUC_EINSUM_MAX_LABELS], L = 0;
  bool in_out[GPUC_EINSUM_MAX_LABELS] = {false};
  for (int d = 0; d < es->out_rank; d++) { order[L++] = es->out_lab[d]; in_out[es->out_lab[d]] = true; }
  for (int l = 0; l < es->nlab; l++) if (!in_out[l]) order[L++] = l;
  for (int j = 0; j < L; j++) pos[order[j]] = j;
  lp->nin = es->nin;
  lp->L = L;
  lp->st = calloc((size_t)es->nin * (size_t)L + 1, sizeof *lp->st);
  if (!lp->st) return gpuc_op_fail(c, "out of host memory");
  for (int j = 0; j < L; j++) lp->dim[j] = es->dim[order[j]];
  int64_t str[GPUC_MAX_RANK];
  for (int k = 0; k < es->nin; k++) {
    const Tensor *x = c->in[k];
    gpuc_strides(x, str);
    for (int a = 0; a < x->rank; a++)
      if (x->dims[a] != 1) lp->st[k * L + pos[es->in_lab[k][a]]] += str[a];
  }
  gpuc_strides(y, str);
  memset(lp->ost, 0, sizeof lp->ost);
  for (int d = 0; d < es->out_rank; d++) lp->ost[d] = y->dims[d] == 1 ? 0 : str[d];
  return 0;
}

/* Sum of products over every label assignment. v[k] are the inputs as
 * double (is_float) or int64; acc has one slot per output element. */
static int run_loop(OpCtx *c, const Loop *lp, void *const *v, bool is_float, void *acc) {
  int L = lp->L, nin = lp->nin;
  for (int j = 0; j < L; j++)
    if (lp->dim[j] == 0) return 0; /* an empty label: every sum is empty */
  int64_t *off = calloc((size_t)nin + 1, sizeof *off);
  if (!off) return gpuc_op_fail(c, "out of host memory");
  int64_t idx[GPUC_EINSUM_MAX_LABELS] = {0}, yo = 0;
  int in = L - 1; /* innermost label, looped directly */
  int64_t n = L ? lp->dim[in] : 1, ys = L ? lp->ost[in] : 0;
  for (;;) {
    for (int64_t t = 0; t < n; t++) {
      if (is_float) {
        double p = 1;
        for (int k = 0; k < nin; k++)
          p *= ((const double *)v[k])[off[k] + (L ? t * lp->st[k * L + in] : 0)];
        ((double *)acc)[yo + t * ys] += p;
      } else {
        uint64_t p = 1;
        for (int k = 0; k < nin; k++)
          p *= (uint64_t)((const int64_t *)v[k])[off[k] + (L ? t * lp->st[k * L + in] : 0)];
        ((uint64_t *)acc)[yo + t * ys] += p;
      }
    }
    int j = in - 1; /* odometer over the other labels */
    for (; j >= 0; j--) {
      for (int k = 0; k < nin; k++) off[k] += lp->st[k * L + j];
      yo += lp->ost[j];
      if (++idx[j] < lp->dim[j]) break;
      for (int k = 0; k < nin; k++) off[k] -= lp->st[k * L + j] * idx[j];
      yo -= lp->ost[j] * idx[j];
      idx[j] = 0;
    }
    if (j < 0) break;
  }
  free(off);
  return 0;
}

int ref_Einsum(OpCtx *c) {
  Tensor *y = c->out[0];
  GpucEinsum es;
  if (gpuc_einsum_parse(c, &es)) return -1;
  Loop lp = {0};
  bool is_float = gpuc_dtype_is_float(y->dt);
  int64_t ny = gpuc_numel(y);
  void **v = calloc((size_t)c->nin + 1, sizeof *v);
  void *acc = calloc((size_t)ny + 1, 8);
  int rc = -1;
  if (!v || !acc) { gpuc_op_fail(c, "out of host memory"); goto done; }
  for (int k = 0; k < c->nin; k++) { /* inputs as double or int64 copies */
    const Tensor *x = c->in[k];
    int64_t nx = gpuc_numel(x);
    if (!(v[k] = malloc((size_t)(nx + 1) * 8))) { gpuc_op_fail(c, "out of host memory"); goto done; }
    for (int64_t i = 0; i < nx; i++) {
      if (is_float) ((double *)v[k])[i] = gpuc_get_f64(x, i);
      else ((int64_t *)v[k])[i] = gpuc_get_i64(x, i);
    }
  }
  if (loop_init(c, &es, y, &lp) || run_loop(c, &lp, v, is_float, acc)) goto done;
  for (int64_t i = 0; i < ny; i++) {
    if (is_float) gpuc_set_f64(y, i, ((double *)acc)[i]);
    else gpuc_set_i64(y, i, ((int64_t *)acc)[i]);
  }
  rc = 0;
done:
  if (v)
    for (int k = 0; k < c->nin; k++) free(v[k]);
  free(v);
  free(acc);
  free(lp.st);
  gpuc_einsum_free(&es);
  return rc;
}
