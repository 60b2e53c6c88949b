/* ONNX frontend: untrusted .onnx / TensorProto .pb files into the IR.
 * Every size, index and offset is validated before use; each failure is one
 * line in GpucErr naming the file, the node or tensor, and the reason. */
#ifndef GPUC_FRONTEND_H
#define GPUC_FRONTEND_H
#include "ir.h"

#define GPUC_PROTO_MAX_DEPTH 64            /* nesting of ONNX messages */
#define GPUC_PROTO_MAX_FIELDS 4000000      /* fields of graphs, nodes, attributes... */
#define GPUC_MODEL_MAX_BYTES ((int64_t)4 << 30)

/* Load and validate a model: decode, convert to IR, toposort, verify, infer.
 * Shapes bound with --shape must be applied before inference, so they are
 * passed in here (names[i] = dims of rank ranks[i]). */
typedef struct GpucShapeBind {
  const char *name;
  int rank;
  int64_t dims[GPUC_MAX_RANK];
} GpucShapeBind;

Graph *gpuc_onnx_load(const char *path, const GpucShapeBind *binds, int nbinds, GpucErr *e);
/* The same from a serialized ModelProto in memory (the C API's
 * gpuc_compile_bytes); `what` names it in messages; no external data. */
Graph *gpuc_onnx_load_bytes(const void *data, size_t len, const char *what, const GpucShapeBind *binds, int nbinds,
                            GpucErr *e);

/* Whether the importer expands default-domain op `op` of opset `opset`
 * into primitive ops (frontend/onnx_attention23.c): Attention from 23. */
bool gpuc_onnx_op_expanded(const char *op, int64_t opset);

/* RotaryEmbedding-23 nodes of an imported, inferred graph replaced by the
 * primitive ops that compute it (frontend/onnx_rotary.c); the graph is
 * sorted and inferred again. gpuc_onnx_load calls it. */
int gpuc_onnx_expand_rotary(Graph *g, GpucErr *e);

/* Read a serialized TensorProto (.pb, as in ONNX test data). *name_out gets
 * a malloc'ed copy of its name (may be empty). */
Tensor *gpuc_onnx_load_tensor_pb(const char *path, char **name_out, GpucErr *e);

/* Wire-format pre-scan (see proto_scan.c). */
#include <stdint.h>
int gpuc_proto_scan(const uint8_t *buf, size_t len, const char *path, GpucErr *e);

/* Read a whole regular file under a size cap. */
int gpuc_read_file(const char *path, int64_t max_bytes, uint8_t **buf, size_t *len, GpucErr *e);

#endif
