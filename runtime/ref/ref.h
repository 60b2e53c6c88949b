/* CPU reference executor: one plain C kernel per op (ref_<Op> in
 * ref_*.c), run node by node in topological order. It is the oracle the
 * GPU backend and every pass are checked against, so kernels favour the
 * obviously-correct over the fast (Conv and MatMul excepted: they must run
 * a ResNet-18 in seconds). Floats accumulate in f32 or f64; f16/bf16 are
 * computed in f32. */
#ifndef GPUC_REF_H
#define GPUC_REF_H
#include "ir.h"

/* Run g. inputs[i] is the tensor for g->inputs[i] (checked against the
 * model's dtype and known dims). On success outputs[i] (for g->outputs[i])
 * are new tensors the caller frees with gpuc_tensor_free. */
int gpuc_ref_run(const Graph *g, const Tensor *const *inputs, Tensor **outputs, GpucErr *e);

/* Run one node's reference kernel on given inputs: infer output shapes,
 * allocate outputs, compute. outs[i] are filled with new tensors (NULL for
 * unused optional outputs when want_out[i] is false). */
int gpuc_ref_run_node(const Graph *g, const Node *n, const Tensor **ins, Tensor **outs,
                      GpucErr *e);

#define OP(E, Name, min_in, max_in, min_out, max_out, flags) int ref_##Name(OpCtx *c);
#include "ops.def"
#undef OP

#endif
