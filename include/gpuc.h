/* gpuc public API: the compiler side (ONNX frontend, passes, CPU
 * reference, code generation). A deployed program needs only the runtime:
 * include/gpuc_rt.h and libgpuc_rt.
 *
 *   GpucErr err = {0};
 *   Graph *g = gpuc_onnx_load("model.onnx", NULL, 0, &err);   // validated
 *   if (!g) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *   Tensor *outs[1];
 *   if (gpuc_ref_run(g, inputs, outs, &err)) { ... }           // CPU oracle
 *   gpuc_tensor_free(outs[0]);
 *   gpuc_graph_free(g);
 */
#ifndef GPUC_H
#define GPUC_H
#include "../ir/ir.h"
#include "../frontend/frontend.h"
#include "../runtime/ref/ref.h"
#include "../runtime/npy.h"
#include "../passes/passes.h"
#include "../codegen/codegen.h"
#include "gpuc_rt.h"
#endif
