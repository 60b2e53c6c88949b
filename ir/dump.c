/* gpuc inspect: a summary (inputs, outputs, ops by count, parameters) and a
 * full text dump of the graph. */
#include "ir.h"
#include <stdlib.h>
#include <string.h>

static void print_value_type(const Value *v, FILE *f) {
  char s[200];
  if (v->t.rank < 0) { fprintf(f, "%s[?]", gpuc_dtype_name(v->t.dt)); return; }
  fprintf(f, "%s[", gpuc_dtype_name(v->t.dt));
  for (int i = 0; i < v->t.rank; i++) {
    if (v->t.dims[i] >= 0) fprintf(f, "%s%lld", i ? "," : "", (long long)v->t.dims[i]);
    else fprintf(f, "%s%s", i ? "," : "", v->sym[i] ? v->sym[i] : "?");
  }
  fprintf(f, "]");
  (void)s;
}

void gpuc_graph_summary(const Graph *g, FILE *f) {
  fprintf(f, "model: %s\nopset: %lld\n", g->path, (long long)g->opset);
  fprintf(f, "inputs (%d):\n", g->ninputs);
  for (int i = 0; i < g->ninputs; i++) {
    fprintf(f, "  %s: ", g->values[g->inputs[i]].name);
    print_value_type(&g->values[g->inputs[i]], f);
    fprintf(f, "\n");
  }
  fprintf(f, "outputs (%d):\n", g->noutputs);
  for (int i = 0; i < g->noutputs; i++) {
    fprintf(f, "  %s: ", g->values[g->outputs[i]].name);
    print_value_type(&g->values[g->outputs[i]], f);
    fprintf(f, "\n");
  }
  int count[GPUC_OP_COUNT] = {0};
  for (int i = 0; i < g->nnodes; i++) count[g->nodes[i].op]++;
  fprintf(f, "nodes: %d\n", g->nnodes);
  for (int op = 0; op < GPUC_OP_COUNT; op++)
    if (count[op]) fprintf(f, "  %-28s %d\n", gpuc_ops[op].name, count[op]);
  int64_t params = 0, pbytes = 0, consts = 0, cbytes = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = &g->values[i];
    if (!v->is_const) continue;
    if (v->is_param) { params += gpuc_numel(&v->t); pbytes += (int64_t)gpuc_tensor_bytes(&v->t); }
    else { consts += gpuc_numel(&v->t); cbytes += (int64_t)gpuc_tensor_bytes(&v->t); }
  }
  fprintf(f, "parameters: %lld (%lld bytes)\n", (long long)params, (long long)pbytes);
  fprintf(f, "other constants: %lld elements (%lld bytes)\n", (long long)consts, (long long)cbytes);
}

static void print_attr(const Attr *a, FILE *f) {
  fprintf(f, "%s=", a->name);
  switch (a->kind) {
  case GPUC_ATTR_FLOAT: fprintf(f, "%g", a->f); break;
  case GPUC_ATTR_INT: fprintf(f, "%lld", (long long)a->i); break;
  case GPUC_ATTR_STRING: fprintf(f, "\"%s\"", a->s); break;
  case GPUC_ATTR_TENSOR: {
    char s[160];
    gpuc_shape_str(a->t, s, sizeof s);
    fprintf(f, "tensor<%s %s>", gpuc_dtype_name(a->t->dt), s);
    break;
  }
  case GPUC_ATTR_FLOATS:
    fprintf(f, "[");
    for (int i = 0; i < a->n; i++) fprintf(f, "%s%g", i ? "," : "", a->floats[i]);
    fprintf(f, "]");
    break;
  case GPUC_ATTR_INTS:
    fprintf(f, "[");
    for (int i = 0; i < a->n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)a->ints[i]);
    fprintf(f, "]");
    break;
  case GPUC_ATTR_STRINGS:
    fprintf(f, "[");
    for (int i = 0; i < a->n; i++) fprintf(f, "%s\"%s\"", i ? "," : "", a->strings[i]);
    fprintf(f, "]");
    break;
  }
}

void gpuc_graph_dump(const Graph *g, FILE *f) {
  fprintf(f, "graph %s (opset %lld)\n", g->path, (long long)g->opset);
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = &g->values[i];
    if (!v->is_const) continue;
    fprintf(f, "  const %%%d %s: ", i, v->name);
    print_value_type(v, f);
    fprintf(f, "%s\n", v->is_param ? " param" : "");
  }
  for (int i = 0; i < g->ninputs; i++) {
    fprintf(f, "  input %%%d %s: ", g->inputs[i], g->values[g->inputs[i]].name);
    print_value_type(&g->values[g->inputs[i]], f);
    fprintf(f, "\n");
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    fprintf(f, "  ");
    for (int k = 0; k < n->nout; k++) {
      if (n->out[k] < 0) { fprintf(f, "%s_", k ? ", " : ""); continue; }
      fprintf(f, "%s%%%d:", k ? ", " : "", n->out[k]);
      print_value_type(&g->values[n->out[k]], f);
    }
    fprintf(f, " = %s(", gpuc_op_name(n));
    for (int k = 0; k < n->nin; k++)
      n->in[k] < 0 ? fprintf(f, "%s_", k ? ", " : "") : fprintf(f, "%s%%%d", k ? ", " : "", n->in[k]);
    fprintf(f, ")");
    for (int k = 0; k < n->nattr; k++) { fprintf(f, k ? ", " : " {"); print_attr(&n->attrs[k], f); }
    fprintf(f, "%s  # %s", n->nattr ? "}" : "", n->name);
    if (n->fuse_group) fprintf(f, " [fused %d]", n->fuse_group);
    fprintf(f, "\n");
  }
  fprintf(f, "  return");
  for (int i = 0; i < g->noutputs; i++)
    fprintf(f, "%s %%%d (%s)", i ? "," : "", g->outputs[i], g->values[g->outputs[i]].name);
  fprintf(f, "\n");
}
