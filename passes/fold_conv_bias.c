/* A Conv's bias moved into the next Conv's, where that one reads it alone
 * and without padding:
 *   B(conv_A(x) + bA) = conv_B(conv_A(x)) + sum_{c,r,s} W_B[k,c,r,s] bA[c]
 * holds exactly when every window of B lies inside its input (no zero
 * padding sees bA missing), per output channel k. MobileNetV3's and
 * EfficientNet's projection conv feeding the next block's 1x1 expansion:
 * A is then the plain cuDNN convolution, without the generated kernel
 * that read and wrote its whole output to add bA (codegen/lower_conv.c).
 * Conditions: A and B are Conv (NCHW, before fuse_conv/layout_nhwc), A's
 * output read only by B as X and no graph output, A's bias and B's weights
 * (and bias) constants, B has group 1 and all pads 0 (auto_pad NOTSET or
 * VALID); not for a training graph (the biases are being trained). The new
 * bias is computed in f64 and stored in B's weights' dtype. */
#include "passes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool unpadded(const Node *n) {
  const char *ap = gpuc_attr_s(n, "auto_pad", "NOTSET");
  if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) return false;
  const int64_t *p;
  int np = gpuc_attr_ints(n, "pads", &p);
  for (int i = 0; i < np; i++)
    if (p[i] != 0) return false;
  return true;
}

static const Value *const_of(const Graph *g, int v) {
  return v >= 0 && g->values[v].is_const && g->values[v].t.data && gpuc_dtype_is_float(g->values[v].t.dt)
             ? &g->values[v] : NULL;
}

int pass_fold_conv_bias(Graph *g, const PassOptions *o, GpucErr *e) {
  if (o->training) return 0;
  int changes = 0;
  int *readers = malloc(sizeof(int) * ((size_t)g->nvalues + 1)), *reader = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!readers || !reader) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
  gpuc_graph_count_readers(g, readers, reader);
  for (int i = 0; i < g->nnodes; i++) {
    Node *a = &g->nodes[i];
    if (a->op != GPUC_OP_CONV || a->nin < 3 || a->in[2] < 0 || a->out[0] < 0) continue;
    int y = a->out[0];
    if (readers[y] != 1 || g->values[y].is_output) continue;
    Node *b = &g->nodes[reader[y]];
    if (b->op != GPUC_OP_CONV || b->in[0] != y || b->in[1] == y || (b->nin > 2 && b->in[2] == y)) continue;
    const Value *ba = const_of(g, a->in[2]), *wb = const_of(g, b->in[1]);
    const Value *bb = b->nin > 2 && b->in[2] >= 0 ? const_of(g, b->in[2]) : NULL;
    if (!ba || !wb || (b->nin > 2 && b->in[2] >= 0 && !bb) || gpuc_attr_i(b, "group", 1) != 1 || !unpadded(b))
      continue;
    const Tensor *w = &wb->t;
    int64_t K = w->rank >= 3 ? w->dims[0] : 0, C = w->rank >= 3 ? w->dims[1] : 0;
    if (K <= 0 || gpuc_numel(&ba->t) != C || (bb && gpuc_numel(&bb->t) != K)) continue;
    int64_t per_c = gpuc_numel(w) / (K * C); /* R*S.. */
    char name[512];
    snprintf(name, sizeof name, "%s.bias_from_%s", b->name, a->name);
    int nv = gpuc_graph_add_value(g, name);
    if (nv < 0) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
    a = &g->nodes[i]; /* adding values may move the arrays */
    b = &g->nodes[reader[y]];
    ba = &g->values[a->in[2]];
    w = &g->values[b->in[1]].t;
    bb = b->nin > 2 && b->in[2] >= 0 ? &g->values[b->in[2]] : NULL;
    Value *out = &g->values[nv];
    gpuc_set_shape(&out->t, w->dt, 1, &K);
    if (gpuc_tensor_alloc(&out->t, e)) { free(readers); free(reader); return -1; }
    out->is_const = true;
    for (int64_t k = 0; k < K; k++) {
      double s = bb ? gpuc_get_f64(&bb->t, k) : 0;
      for (int64_t c = 0; c < C; c++) {
        double wsum = 0;
        for (int64_t j = 0; j < per_c; j++) wsum += gpuc_get_f64(w, (k * C + c) * per_c + j);
        s += wsum * gpuc_get_f64(&ba->t, c);
      }
      gpuc_set_f64(&out->t, k, s);
    }
    if (b->nin < 3) {
      int *in = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
      if (!in) { free(readers); free(reader); return gpuc_err_set(e, "%s: out of memory", g->path); }
      in[0] = b->in[0];
      in[1] = b->in[1];
      b->in = in;
      b->nin = 3;
    }
    b->in[2] = nv;
    a->nin = 2; /* A without bias */
    changes++;
  }
  free(readers); free(reader);
  return changes;
}
