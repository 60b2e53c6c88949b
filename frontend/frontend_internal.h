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
#endif
