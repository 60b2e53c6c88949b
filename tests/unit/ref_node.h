/* One node of op through the reference executor, on the given inputs,
 * with the integer attribute `to` when it is non-zero (the Cast-like ops
 * of the int8/fp8 tests); counts a CHECK. Include after check.h and ref.h. */
#ifndef GPUC_TEST_REF_NODE_H
#define GPUC_TEST_REF_NODE_H

static int run_op(GpucOp op, int nin, const Tensor **ins, int nout, Tensor **outs, int to) {
  Graph *g = gpuc_graph_new("ref_node");
  int ni = gpuc_graph_add_node(g, op, "n", nin, nout);
  for (int k = 0; k < nin; k++) g->nodes[ni].in[k] = gpuc_graph_add_value(g, "i");
  Node *n = &g->nodes[ni]; /* after the values: adding one may move the node array */
  for (int k = 0; k < nout; k++) n->out[k] = 0;
  Attr a = {.name = "to", .kind = GPUC_ATTR_INT, .i = to};
  if (to) { n->attrs = &a; n->nattr = 1; }
  GpucErr e = {0};
  int rc = gpuc_ref_run_node(g, n, ins, outs, &e);
  CHECK(rc == 0, "%s: %s", gpuc_ops[op].name, e.msg);
  n->attrs = NULL;
  n->nattr = 0;
  gpuc_graph_free(g);
  return rc;
}
#endif
