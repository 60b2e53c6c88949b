/* Tensor files: the first byte picks the reader, the rest is the file:
 * even -> .npy (gpuc_npy_load), odd -> ONNX TensorProto .pb
 * (gpuc_onnx_load_tensor_pb), as `gpuc run --input NAME=FILE` reads them. */
#include "fuzz_util.h"
#include "frontend.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool pb = data[0] & 1;
  const char *path = fuzz_file(pb ? "tensor.pb" : "tensor.npy", data + 1, size - 1);
  GpucErr e = {0};
  char *name = NULL;
  Tensor *t = pb ? gpuc_onnx_load_tensor_pb(path, &name, &e) : gpuc_npy_load(path, &e);
  if (!t) { fuzz_refused(&e, pb ? "tensor .pb" : "tensor .npy"); free(name); return 0; }
  /* touch every byte the tensor claims */
  volatile uint8_t sum = 0;
  size_t n = gpuc_tensor_bytes(t);
  for (size_t i = 0; i < n; i++) sum ^= ((const uint8_t *)t->data)[i];
  (void)sum;
  gpuc_tensor_free(t);
  free(name);
  return 0;
}
