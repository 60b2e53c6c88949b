/* Strided views walked up through data-movement ops: see view_walk.h. */
#include "view_walk.h"
#include <string.h>

/* ir/infer_shape.c: per axis the first index, step and count of a Slice */
int gpuc_slice_plan(OpCtx *c, int64_t *start, int64_t *step, int64_t *count);

static void row_major(const Tensor *t, int64_t *st) {
  int64_t s = 1;
  for (int a = t->rank - 1; a >= 0; a--) {
    st[a] = s;
    s *= t->dims[a];
  }
}

void gpuc_view_row_major(GpucView *v, const Tensor *t) {
  memset(v, 0, sizeof *v);
  v->rank = t->rank;
  row_major(t, v->st);
  for (int a = 0; a < t->rank; a++) v->n[a] = t->dims[a];
}

bool gpuc_view_is_plain(const GpucView *v, int64_t numel) {
  if (v->off != 0) return false;
  int64_t want = 1; /* the stride the next axis in (from the innermost) must have */
  for (int a = v->rank - 1; a >= 0; a--) {
    if (v->n[a] == 1) continue;
    if (v->st[a] != want) return false;
    want *= v->n[a];
  }
  return want == numel;
}

/* With split: axes that cover whole inner axes of y (stride a multiple of
 * one y axis, larger than what fits it) become an outer and an inner axis,
 * until each lies inside one y axis. false when they cannot. */
static bool refine(GpucView *v, const Tensor *y, const int64_t *sty) {
  for (int j = 0; j < v->rank; j++) {
    if (v->n[j] == 1 || v->st[j] == 0) continue;
    int a = -1;
    for (int x = 0; x < y->rank && a < 0; x++)
      if (y->dims[x] > 1 && sty[x] <= v->st[j]) a = x;
    if (a < 0 || v->st[j] != sty[a] || v->n[j] <= y->dims[a]) continue; /* fits, or the checks fail later */
    if (v->n[j] % y->dims[a] || v->rank == GPUC_VIEW_MAX_AXES) return false;
    /* axis j -> (outer n / dims[a], stride * dims[a]) then (inner dims[a], stride) */
    memmove(&v->st[j + 1], &v->st[j], sizeof(int64_t) * (size_t)(v->rank - j));
    memmove(&v->n[j + 1], &v->n[j], sizeof(int64_t) * (size_t)(v->rank - j));
    v->rank++;
    v->n[j] = v->n[j + 1] / y->dims[a];
    v->st[j] = v->st[j + 1] * y->dims[a];
    v->n[j + 1] = y->dims[a];
    j--; /* the outer part may need splitting again */
  }
  return true;
}

bool gpuc_view_through(GpucView *v, const Tensor *y, const Tensor *z, const int *map, const int64_t *start,
                       const int64_t *fixed, bool split) {
  int64_t sty[GPUC_MAX_RANK], stz[GPUC_MAX_RANK], o[GPUC_MAX_RANK], reach[GPUC_MAX_RANK];
  int axis[GPUC_VIEW_MAX_AXES];
  int64_t coef[GPUC_VIEW_MAX_AXES];
  if (!gpuc_shape_known(y) || !gpuc_shape_known(z) || y->rank > GPUC_MAX_RANK || z->rank > GPUC_MAX_RANK ||
      v->off < 0 || v->off >= gpuc_numel(y))
    return false;
  row_major(y, sty);
  row_major(z, stz);
  GpucView w = *v;
  if (split && !refine(&w, y, sty)) return false;
  int64_t rest = w.off;
  for (int a = 0; a < y->rank; a++) {
    o[a] = rest / sty[a];
    rest -= o[a] * sty[a];
    reach[a] = o[a];
  }
  for (int j = 0; j < w.rank; j++) {
    axis[j] = -1;
    coef[j] = 0;
    if (w.n[j] == 1 || w.st[j] == 0) continue; /* no step along it */
    for (int a = 0; a < y->rank && axis[j] < 0; a++)
      if (y->dims[a] > 1 && sty[a] <= w.st[j]) axis[j] = a;
    if (axis[j] < 0 || w.st[j] % sty[axis[j]]) return false;
    coef[j] = w.st[j] / sty[axis[j]];
    reach[axis[j]] += coef[j] * (w.n[j] - 1);
  }
  for (int a = 0; a < y->rank; a++)
    if (reach[a] >= y->dims[a]) return false; /* a step would carry into the next axis */
  w.off = 0;
  for (int a = 0; a < y->rank; a++) w.off += (o[a] + start[a]) * stz[map[a]];
  for (int x = 0; x < z->rank; x++)
    if (fixed[x] >= 0) w.off += fixed[x] * stz[x];
  for (int j = 0; j < w.rank; j++)
    if (axis[j] >= 0) w.st[j] = coef[j] * stz[map[axis[j]]];
  *v = w;
  return true;
}

int gpuc_view_step(const Graph *g, int y, GpucView *v, bool split) {
  int p = g->values[y].producer;
  if (p < 0) return -1;
  const Node *n = &g->nodes[p];
  if (n->nin < 1 || n->in[0] < 0) return -1;
  int z = n->in[0];
  const Tensor *yt = &g->values[y].t, *zt = &g->values[z].t;
  if (yt->dt != zt->dt || !gpuc_shape_known(yt) || !gpuc_shape_known(zt) || zt->rank > GPUC_MAX_RANK ||
      yt->rank > GPUC_MAX_RANK)
    return -1;
  int map[GPUC_MAX_RANK];
  int64_t start[GPUC_MAX_RANK] = {0}, fixed[GPUC_MAX_RANK];
  for (int x = 0; x < GPUC_MAX_RANK; x++) fixed[x] = -1;
  switch (n->op) {
  case GPUC_OP_RESHAPE: case GPUC_OP_FLATTEN: case GPUC_OP_SQUEEZE: case GPUC_OP_UNSQUEEZE: case GPUC_OP_IDENTITY:
    return gpuc_numel(yt) == gpuc_numel(zt) ? z : -1; /* the same row-major order */
  case GPUC_OP_TRANSPOSE: {
    const int64_t *perm;
    if (gpuc_attr_ints(n, "perm", &perm) != yt->rank || yt->rank != zt->rank) return -1;
    for (int a = 0; a < yt->rank; a++) {
      if (perm[a] < 0 || perm[a] >= zt->rank) return -1;
      map[a] = (int)perm[a];
    }
    break;
  }
  case GPUC_OP_SPLIT: {
    int64_t ax = gpuc_attr_i(n, "axis", 0);
    if (ax < 0) ax += zt->rank;
    if (ax < 0 || ax >= zt->rank || yt->rank != zt->rank) return -1;
    int64_t s = 0;
    int k = 0;
    for (; k < n->nout && n->out[k] != y; k++) {
      if (n->out[k] < 0 || !gpuc_shape_known(&g->values[n->out[k]].t)) return -1;
      s += g->values[n->out[k]].t.dims[ax];
    }
    if (k == n->nout) return -1;
    for (int a = 0; a < yt->rank; a++) map[a] = a;
    start[ax] = s;
    break;
  }
  case GPUC_OP_GATHER: { /* one constant index: that slice of the axis, the axis dropped */
    const Value *iv = &g->values[n->in[1]];
    int64_t ax = gpuc_attr_i(n, "axis", 0);
    if (ax < 0) ax += zt->rank;
    if (ax < 0 || ax >= zt->rank || !iv->is_const || !iv->t.data || iv->t.rank != 0 || yt->rank != zt->rank - 1)
      return -1;
    int64_t idx = gpuc_get_i64(&iv->t, 0);
    if (idx < 0) idx += zt->dims[ax];
    if (idx < 0 || idx >= zt->dims[ax]) return -1;
    for (int a = 0; a < yt->rank; a++) map[a] = a < ax ? a : a + 1;
    fixed[ax] = idx;
    break;
  }
  case GPUC_OP_SLICE: { /* constant starts/ends, step 1 (or one element): a window of each axis */
    const Tensor *ins[5] = {NULL, NULL, NULL, NULL, NULL};
    if (n->nin > 5 || yt->rank != zt->rank) return -1;
    for (int i = 0; i < n->nin; i++) ins[i] = n->in[i] >= 0 ? &g->values[n->in[i]].t : NULL;
    GpucErr err; /* a slice the planner refuses is simply not walked through */
    OpCtx oc = {.g = g, .n = n, .nin = n->nin, .nout = n->nout, .in = ins, .err = &err};
    int64_t step[GPUC_MAX_RANK], count[GPUC_MAX_RANK];
    if (gpuc_slice_plan(&oc, start, step, count) != 0) return -1;
    for (int a = 0; a < yt->rank; a++) {
      if (count[a] != yt->dims[a] || (count[a] > 1 && step[a] != 1)) return -1;
      map[a] = a;
    }
    break;
  }
  default:
    return -1;
  }
  return gpuc_view_through(v, yt, zt, map, start, fixed, split) ? z : -1;
}
