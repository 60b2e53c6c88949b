/* Prints the op types a model uses, one per line, each prefixed with '+' if
 * gpuc's op table has it and '-' if not. The conformance runner uses this to
 * tell in-scope tests from out-of-scope ones without trusting gpuc's own
 * import path. Malformed files print nothing and exit 1. */
#include "frontend.h"
#include "onnx.pb-c.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t opset;  /* the model's default-domain opset */

static void print_graph_ops(const Onnx__GraphProto *g, int depth) {
  if (!g || depth > 8) return;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    const char *op = n->op_type ? n->op_type : "";
    bool other_domain = n->domain && *n->domain && strcmp(n->domain, "ai.onnx");
    int k = gpuc_op_lookup(op);
    bool known = (k >= 0 && !(gpuc_ops[k].flags & GPUC_OPF_INTERNAL)) || gpuc_onnx_op_expanded(op, opset);
    printf("%c%s%s%s\n", (!other_domain && known) ? '+' : '-',
           other_domain ? n->domain : "", other_domain ? "." : "", op);
    for (size_t k = 0; k < n->n_attribute; k++) {
      print_graph_ops(n->attribute[k]->g, depth + 1);
      for (size_t j = 0; j < n->attribute[k]->n_graphs; j++)
        print_graph_ops(n->attribute[k]->graphs[j], depth + 1);
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: onnx_op_types MODEL.onnx\n"); return 2; }
  uint8_t *buf;
  size_t len;
  GpucErr e = {0};
  if (gpuc_read_file(argv[1], GPUC_MODEL_MAX_BYTES, &buf, &len, &e) ||
      gpuc_proto_scan(buf, len, argv[1], &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (!m) return 1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const char *d = m->opset_import[i]->domain ? m->opset_import[i]->domain : "";
    if (!*d || !strcmp(d, "ai.onnx")) opset = m->opset_import[i]->version;
  }
  print_graph_ops(m->graph, 0);
  onnx__model_proto__free_unpacked(m, NULL);
  return 0;
}
