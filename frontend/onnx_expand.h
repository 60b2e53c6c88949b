/* Standard ops that gpuc imports as primitive ops, expanded at the
 * protobuf level while functions are inlined (onnx_functions.c), so the
 * rest of gpuc (and its fusions) sees only ops it knows. fx_* is the
 * inliner's small interface: allocations freed with the flat node list,
 * node output, messages. */
#ifndef GPUC_ONNX_EXPAND_H
#define GPUC_ONNX_EXPAND_H
#include "frontend_internal.h"

typedef struct Inliner Inliner;
void *fx_own(Inliner *I, void *p);                  /* NULL stays NULL */
char *fx_cat(Inliner *I, const char *a, const char *b);
int fx_push(Inliner *I, const Onnx__NodeProto *np); /* append to the flat list */
int fx_oom(Inliner *I);
const char *fx_path(const Inliner *I);
GpucErr *fx_err(const Inliner *I);
int64_t fx_opset(const Inliner *I);
uint64_t fx_next_call(Inliner *I);
int fx_elem_type(const Inliner *I, const char *name); /* declared TensorProto type, 0 if none */

/* Attention-23/24 (np renamed and resolved; nname its name for messages). */
int gpuc_onnx_expand_attention(Inliner *I, const Onnx__NodeProto *np, const char *nname);
#endif
