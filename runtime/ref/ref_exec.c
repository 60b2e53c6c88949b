/* The reference executor: liveness-based freeing, input checking, and the
 * dispatch table generated from ops.def. */
#include "ref.h"
#include <stdlib.h>
#include <string.h>

static const GpucOpFn ref_kernels[GPUC_OP_COUNT] = {
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) [GPUC_OP_##E] = ref_##Name,
#include "ops.def"
#undef OP
};

int gpuc_ref_run_node(const Graph *g, const Node *n, const Tensor **ins, Tensor **outs,
                      GpucErr *e) {
  OpCtx c = {.g = g, .n = n, .nin = n->nin, .nout = n->nout, .in = ins, .out = outs,
             .err = e, .runtime = true};
  for (int k = 0; k < n->nout; k++) {
    outs[k] = NULL;
    if (n->out[k] < 0) continue;
    outs[k] = calloc(1, sizeof(Tensor));
    if (!outs[k]) goto oom;
    outs[k]->rank = -1;
  }
  if (gpuc_ops[n->op].infer(&c)) goto fail;
  for (int k = 0; k < n->nout; k++) {
    if (!outs[k]) continue;
    if (!gpuc_shape_known(outs[k]) || outs[k]->dt == GPUC_DT_UNDEF) {
      gpuc_op_fail(&c, "output %d has no known shape after inference", k);
      goto fail;
    }
    if (gpuc_tensor_alloc(outs[k], e)) {
      char what[512];
      snprintf(what, sizeof what, "%s: node '%s' (%s): output %d", g->path, n->name,
               gpuc_op_name(n), k);
      gpuc_err_prefix(e, what);
      goto fail;
    }
  }
  if (ref_kernels[n->op](&c)) goto fail;
  return 0;
oom:
  gpuc_op_fail(&c, "out of host memory");
fail:
  for (int k = 0; k < n->nout; k++) { gpuc_tensor_free(outs[k]); outs[k] = NULL; }
  return -1;
}

static int check_input(const Graph *g, const Value *v, const Tensor *t, GpucErr *e) {
  if (!t) return gpuc_err_set(e, "%s: no data given for input '%s'", g->path, v->name);
  if (v->t.dt != GPUC_DT_UNDEF && t->dt != v->t.dt)
    return gpuc_err_set(e, "%s: input '%s' is %s, the model expects %s", g->path, v->name,
                        gpuc_dtype_name(t->dt), gpuc_dtype_name(v->t.dt));
  if (v->t.rank >= 0) {
    bool ok = t->rank == v->t.rank;
    for (int i = 0; ok && i < t->rank; i++)
      if (v->t.dims[i] >= 0 && v->t.dims[i] != t->dims[i]) ok = false;
    if (!ok) {
      char a[160], b[160];
      gpuc_shape_str(t, a, sizeof a);
      gpuc_shape_str(&v->t, b, sizeof b);
      return gpuc_err_set(e, "%s: input '%s' has shape %s, the model expects %s", g->path,
                          v->name, a, b);
    }
  }
  if (!gpuc_shape_known(t) || !t->data)
    return gpuc_err_set(e, "%s: input '%s' has no data", g->path, v->name);
  return 0;
}

int gpuc_ref_run(const Graph *g, const Tensor *const *inputs, Tensor **outputs, GpucErr *e) {
  int nv = g->nvalues, rc = -1;
  const Tensor **val = calloc((size_t)nv + 1, sizeof *val);
  bool *owned = calloc((size_t)nv + 1, 1);
  int *last_use = malloc(((size_t)nv + 1) * sizeof *last_use);
  const Tensor **ins = malloc(sizeof(*ins) * GPUC_MAX_IO);
  Tensor **outs = malloc(sizeof(*outs) * GPUC_MAX_IO);
  if (!val || !owned || !last_use || !ins || !outs) {
    gpuc_err_set(e, "%s: out of host memory", g->path);
    goto done;
  }
  for (int i = 0; i < nv; i++) {
    last_use[i] = -1;
    if (g->values[i].is_const) val[i] = &g->values[i].t;
  }
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++)
      if (g->nodes[i].in[k] >= 0) last_use[g->nodes[i].in[k]] = i;
  for (int k = 0; k < g->noutputs; k++) last_use[g->outputs[k]] = g->nnodes;
  for (int k = 0; k < g->ninputs; k++) {
    const Value *v = &g->values[g->inputs[k]];
    if (check_input(g, v, inputs[k], e)) goto done;
    val[g->inputs[k]] = inputs[k];
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      ins[k] = n->in[k] >= 0 ? val[n->in[k]] : NULL;
      GPUC_ASSERT(n->in[k] < 0 || ins[k]);
    }
    if (gpuc_ref_run_node(g, n, ins, outs, e)) goto done;
    for (int k = 0; k < n->nout; k++) {
      if (n->out[k] < 0) continue;
      if (last_use[n->out[k]] < 0) { gpuc_tensor_free(outs[k]); continue; } /* dead */
      val[n->out[k]] = outs[k];
      owned[n->out[k]] = true;
    }
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k];
      if (v >= 0 && owned[v] && last_use[v] == i) {
        gpuc_tensor_free((Tensor *)val[v]);
        val[v] = NULL;
        owned[v] = false;
      }
    }
  }
  for (int k = 0; k < g->noutputs; k++) {
    int v = g->outputs[k];
    outputs[k] = NULL;
    /* an output listed twice, or a constant/input as output: copy. Taking
     * clears owned[v], so a second listing copies; no scan over earlier
     * outputs (that was quadratic in the output count). */
    if (owned[v]) { outputs[k] = (Tensor *)val[v]; owned[v] = false; }
    else outputs[k] = gpuc_tensor_clone(val[v], e);
    if (!outputs[k]) {
      for (int j = 0; j < k; j++) { gpuc_tensor_free(outputs[j]); outputs[j] = NULL; }
      goto done;
    }
  }
  rc = 0;
done:
  if (val && owned)
    for (int i = 0; i < nv; i++) if (owned[i]) gpuc_tensor_free((Tensor *)val[i]);
  free(val); free(owned); free(last_use); free(ins); free(outs);
  return rc;
}
