/* gpuc public API.
 *
 * Today the library exposes the ONNX frontend and the CPU reference
 * executor; the plan-file runtime (load a compiled plan, bind inputs, run on
 * the GPU) will be added here by the GPU backend work.
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
#endif
