/* --prune: zero weights of Conv and Linear layers, in place.
 *
 *   l1:F  per weight tensor, the round(F * n) entries of smallest magnitude
 *         become 0, as torch.nn.utils.prune.l1_unstructured(amount=F) does:
 *         the count is Python's round() of the double F * n (halves to
 *         even, which nearbyint gives in the default rounding mode), the
 *         order is |w| ascending. torch takes the k smallest with
 *         torch.topk, which leaves ties unspecified; here the lower flat
 *         index goes first among equal magnitudes (a stable order), and a
 *         NaN counts as the largest magnitude (topk's order too). Layers:
 *         Conv/FusedConv weights (any rank) and the constant 2-D B of
 *         MatMul/MatMulBias/Gemm.
 *   2:4   Linear weights only (MatMul/MatMulBias/Gemm with a constant 2-D
 *         B): in each group of 4 consecutive entries along the reduction
 *         dim K (B [K,N]: down a column; Gemm transB=1, B [N,K]: along a
 *         row), the 2 largest magnitudes stay; on equal magnitudes the
 *         lower index stays (NaN the largest). K must divide by 4, else
 *         the layer stays dense (reported). Convolutions are not pruned
 *         2:4: gpuc runs them through cuDNN, not as GEMMs.
 *
 * The zeros are the model now: the CPU reference runs the pruned graph
 * (`gpuc run --cpu --prune`), and the GPU runs the same zeros, dense or
 * (2:4, half) on sparse tensor cores (runtime/gpu/sparse_gemm.c). */
#include "passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int gpuc_prune_parse(const char *arg, int *kind, double *fraction) {
  *kind = GPUC_PRUNE_NONE;
  *fraction = 0;
  if (!arg) return -1;
  if (!strcmp(arg, "2:4")) { *kind = GPUC_PRUNE_24; return 0; }
  if (strncmp(arg, "l1:", 3)) return -1;
  char *end;
  double f = strtod(arg + 3, &end);
  if (end == arg + 3 || *end || !(f >= 0 && f <= 1)) return -1; /* NaN fails too */
  *kind = GPUC_PRUNE_L1;
  *fraction = f;
  return 0;
}

int gpuc_prune_target(const Graph *g, const Node *n, int kind, int *kaxis) {
  *kaxis = -1;
  if (kind == GPUC_PRUNE_NONE || n->nin < 2 || n->in[1] < 0) return -1;
  const Tensor *w = &g->values[n->in[1]].t;
  if (!w->data || !gpuc_dtype_is_float(w->dt) || !gpuc_shape_known(w)) return -1;
  switch (n->op) {
  case GPUC_OP_CONV:
  case GPUC_OP_FUSEDCONV:
    return kind == GPUC_PRUNE_L1 && w->rank >= 3 ? n->in[1] : -1;
  case GPUC_OP_MATMUL:
  case GPUC_OP_MATMULBIAS:
    if (w->rank != 2) return -1;
    *kaxis = 0;
    return n->in[1];
  case GPUC_OP_GEMM:
    if (w->rank != 2) return -1;
    *kaxis = gpuc_attr_i(n, "transB", 0) ? 1 : 0;
    return n->in[1];
  default:
    return -1;
  }
}

typedef struct { double m; int64_t i; bool nan; } Entry;

static int cmp_entry(const void *pa, const void *pb) {
  const Entry *a = pa, *b = pb;
  if (a->nan != b->nan) return a->nan ? 1 : -1;
  if (!a->nan && a->m != b->m) return a->m < b->m ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

/* l1: zero the k smallest magnitudes. */
static int prune_l1(Tensor *w, double fraction, GpucErr *e) {
  int64_t n = gpuc_numel(w);
  int64_t k = (int64_t)nearbyint(fraction * (double)n);
  if (k <= 0) return 0;
  if (k > n) k = n;
  Entry *ent = malloc(sizeof *ent * (size_t)n);
  if (!ent) return gpuc_err_set(e, "out of memory");
  for (int64_t i = 0; i < n; i++) {
    double v = gpuc_get_f64(w, i);
    ent[i] = (Entry){.m = fabs(v), .i = i, .nan = isnan(v)};
  }
  qsort(ent, (size_t)n, sizeof *ent, cmp_entry);
  for (int64_t j = 0; j < k; j++) gpuc_set_f64(w, ent[j].i, 0.0);
  free(ent);
  return 0;
}

/* 2:4 along axis kaxis of a 2-D w. */
static void prune_24(Tensor *w, int kaxis) {
  int64_t rows = w->dims[0], cols = w->dims[1];
  int64_t K = kaxis == 0 ? rows : cols, other = kaxis == 0 ? cols : rows;
  for (int64_t o = 0; o < other; o++)
    for (int64_t k0 = 0; k0 < K; k0 += 4) {
      int64_t idx[4];
      bool nan[4];
      double m[4];
      for (int j = 0; j < 4; j++) {
        idx[j] = kaxis == 0 ? (k0 + j) * cols + o : o * cols + k0 + j;
        double v = gpuc_get_f64(w, idx[j]);
        nan[j] = isnan(v);
        m[j] = fabs(v);
      }
      /* rank each entry: how many of the group beat it (larger, or equal
       * and at a lower index); the two with rank >= 2 become 0 */
      for (int j = 0; j < 4; j++) {
        int beaten = 0;
        for (int q = 0; q < 4; q++) {
          if (q == j) continue;
          bool bigger = nan[q] != nan[j] ? nan[q] : (!nan[q] && m[q] > m[j]);
          bool equal = nan[q] == nan[j] && (nan[q] || m[q] == m[j]);
          beaten += bigger || (equal && q < j);
        }
        if (beaten >= 2) gpuc_set_f64(w, idx[j], 0.0);
      }
    }
}

int64_t gpuc_prune_weight(Tensor *w, int kind, double fraction, int kaxis, GpucErr *e) {
  if (kind == GPUC_PRUNE_L1) {
    if (prune_l1(w, fraction, e)) return -1;
  } else if (kind == GPUC_PRUNE_24) {
    if (w->rank != 2 || kaxis < 0 || kaxis > 1 || w->dims[kaxis] % 4) return -2;
    prune_24(w, kaxis);
  }
  int64_t n = gpuc_numel(w), zeros = 0;
  for (int64_t i = 0; i < n; i++) zeros += gpuc_get_f64(w, i) == 0.0;
  return zeros;
}

int pass_prune(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->prune_kind == GPUC_PRUNE_NONE) return 0;
  FILE *r = o->prune_report;
  bool *done = calloc((size_t)g->nvalues + 1, 1);
  if (!done) return gpuc_err_set(e, "%s: out of memory", g->path);
  int layers = 0, dense = 0;
  int64_t zeros_all = 0, n_all = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    int kaxis, v = gpuc_prune_target(g, n, o->prune_kind, &kaxis);
    if (v < 0 || done[v]) continue; /* a weight two layers share is pruned once */
    done[v] = true;
    Tensor *w = &g->values[v].t;
    char shape[96];
    gpuc_shape_str(w, shape, sizeof shape);
    int64_t zeros = gpuc_prune_weight(w, o->prune_kind, o->prune_fraction, kaxis, e);
    if (zeros == -1) { free(done); gpuc_err_prefix(e, g->path); return -1; }
    if (zeros == -2) {
      dense++;
      if (r) fprintf(r, "    %s (%s) weight %s: kept dense: K = %lld does not divide by 4\n", n->name,
                     gpuc_op_name(n), shape, (long long)w->dims[kaxis]);
      continue;
    }
    int64_t numel = gpuc_numel(w);
    layers++;
    zeros_all += zeros;
    n_all += numel;
    if (r) fprintf(r, "    %s (%s) weight '%s' %s: %.2f%% zeros (%lld of %lld)\n", n->name, gpuc_op_name(n),
                   g->values[v].name, shape, 100.0 * (double)zeros / (double)(numel ? numel : 1),
                   (long long)zeros, (long long)numel);
  }
  free(done);
  if (r) {
    fprintf(r, "  pruned %d layers (%s): %.2f%% of their %lld weights are zero", layers,
            o->prune_kind == GPUC_PRUNE_24 ? "2:4 along K" : "l1 unstructured",
            100.0 * (double)zeros_all / (double)(n_all ? n_all : 1), (long long)n_all);
    if (dense) fprintf(r, "; %d kept dense", dense);
    fprintf(r, "\n");
    if (o->prune_kind == GPUC_PRUNE_L1)
      fprintf(r, "  note: unstructured zeros make no layer faster by themselves (the GEMMs and convolutions "
                 "still run dense); --prune 2:4 runs half Linear layers on sparse tensor cores\n");
    if (!layers && !dense)
      fprintf(r, "  note: nothing was pruned: no %s with a constant weight\n",
              o->prune_kind == GPUC_PRUNE_24 ? "Linear layer (MatMul/Gemm, 2-D B)" : "Conv or Linear layer");
  }
  return layers;
}
