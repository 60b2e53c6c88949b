/* gpuc runtime API: what a deployed program links (libgpuc_rt). It loads a
 * plan compiled by `gpuc MODEL.onnx -o PLAN.gpuc`, binds inputs and outputs
 * by name, and runs on the GPU. No compiler, no ONNX, no protobuf-c; CUDA,
 * cuBLASLt and cuDNN are opened at run time.
 *
 *   GpucErr err = {0};
 *   GpucSession *s = gpuc_session_create("model.gpuc", 0, &err);
 *   if (!s) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *   gpuc_session_set_input(s, "input", host_tensor, &err);   // host memory
 *   gpuc_session_replay(s, &err);                               // CUDA graph replay
 *   Tensor *y = gpuc_session_get_output(s, "output", &err);  // new host tensor
 *   gpuc_tensor_free(y);
 *   gpuc_session_free(s);
 */
#ifndef GPUC_RT_H
#define GPUC_RT_H
#include "../ir/ir.h"
#include "../runtime/plan.h"
#include "../runtime/gpu/session.h"
#endif
