#ifndef GPUC_FRONTEND_INTERNAL_H
#define GPUC_FRONTEND_INTERNAL_H
#include "frontend.h"
#include "onnx.pb-c.h"

GpucDType gpuc_onnx_dtype(int32_t onnx_type);
const char *gpuc_onnx_dtype_name(int32_t onnx_type);
/* Convert tp into *out (data malloc'ed). model_dir: folder external data may
 * come from, or NULL to refuse external data. what: "file: tensor 'x'" for
 * messages. */
int gpuc_tensor_from_proto(const Onnx__TensorProto *tp, const char *model_dir,
                           const char *what, Tensor *out, GpucErr *e);

/* The graph's nodes with model-local functions inlined (onnx_functions.c):
 * node[0..n) for convert_graph; without functions it is the graph's own
 * array. Free with gpuc_flat_nodes_free after the nodes are converted. */
typedef struct GpucFlatNodes {
  const Onnx__NodeProto **node;
  size_t n, cap;
  void **owned;                 /* allocations made while inlining */
  size_t nowned, capowned;
} GpucFlatNodes;
int gpuc_onnx_inline_functions(const Onnx__ModelProto *mp, int64_t model_opset, const char *path,
                               GpucFlatNodes *out, GpucErr *e);
void gpuc_flat_nodes_free(GpucFlatNodes *f);
#endif
