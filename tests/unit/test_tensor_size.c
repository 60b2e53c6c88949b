/* A TensorProto's declared size is checked against the data it carries
 * before anything is allocated: a few bytes of hostile .pb (or an
 * initializer inside a model) must not buy an allocation of up to the
 * 2 GiB tensor limit (libFuzzer's fuzz_tensor found a 17-byte file doing
 * that). Each case below declares a large tensor whose data is missing,
 * short, or past the end of its external file, and must be refused with
 * the message about the data. Outside sanitizer builds the test first caps
 * the address space at its own size + 256 MiB, so an allocation made
 * before the check fails as "out of host memory" instead of passing
 * unnoticed (ASan reserves terabytes of address space, so there the cap is
 * left off and the messages alone are checked).
 * usage: test_tensor_size WORKDIR */
#include "frontend.h"
#include "onnx.pb-c.h"
#include "check.h"
#include <string.h>
#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

static const char *dir;

/* Pack tp into DIR/name.pb; return the loader's error message ("" if it loaded). */
static const char *load(const char *name, Onnx__TensorProto *tp, char *msg, size_t cap) {
  size_t n = onnx__tensor_proto__get_packed_size(tp);
  unsigned char *b = malloc(n ? n : 1);
  onnx__tensor_proto__pack(tp, b);
  char path[512];
  snprintf(path, sizeof path, "%s/%s.pb", dir, name);
  spit(path, b, n);
  free(b);
  GpucErr e = {0};
  Tensor *t = gpuc_onnx_load_tensor_pb(path, NULL, &e);
  snprintf(msg, cap, "%s", t ? "" : e.msg);
  gpuc_tensor_free(t);
  return msg;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: test_tensor_size WORKDIR\n"); return 2; }
  dir = argv[1];
#ifndef SANITIZED
  struct rlimit rl;
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f && fscanf(f, "%lu", &pages) == 1) {
    rl.rlim_cur = rl.rlim_max = pages * 4096ul + (256ul << 20);
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "address-space cap set");
  }
  if (f) fclose(f);
#endif
  char msg[1024];
  int64_t big[] = {1024, 1024, 384}; /* 384 Mi floats: 1.5 GiB, under the 2 GiB limit */

  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  tp.has_data_type = 1;
  tp.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  tp.n_dims = 3;
  tp.dims = big;
  load("nodata", &tp, msg, sizeof msg);
  CHECK(strstr(msg, "has no data"), "no data: '%s'", msg);

  float few[3] = {1, 2, 3};
  tp.n_float_data = 3;
  tp.float_data = few;
  load("fewfloats", &tp, msg, sizeof msg);
  CHECK(strstr(msg, "has 3 values"), "3 typed values for 1.5 GiB: '%s'", msg);
  tp.n_float_data = 0;
  tp.float_data = NULL;

  uint8_t raw[8] = {0};
  tp.has_raw_data = 1;
  tp.raw_data.len = sizeof raw;
  tp.raw_data.data = raw;
  load("shortraw", &tp, msg, sizeof msg);
  CHECK(strstr(msg, "raw_data has 8 bytes"), "8 raw bytes for 1.5 GiB: '%s'", msg);
  tp.has_raw_data = 0;

  /* over the limit: refused by size, nothing allocated */
  int64_t huge[] = {1024, 1024, 1024};
  tp.dims = huge;
  load("overlimit", &tp, msg, sizeof msg);
  CHECK(strstr(msg, "MiB limit"), "4 GiB tensor: '%s'", msg);
  tp.dims = big;

  /* a .pb alone may not use external data (no model folder) */
  Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
  loc.key = "location";
  loc.value = "missing.bin";
  Onnx__StringStringEntryProto *kv[1] = {&loc};
  tp.has_data_location = 1;
  tp.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  tp.n_external_data = 1;
  tp.external_data = kv;
  load("external", &tp, msg, sizeof msg);
  CHECK(strstr(msg, "external data"), "external data in a .pb: '%s'", msg);
  tp.has_data_location = 0;
  tp.n_external_data = 0;

  /* controls: a small tensor of each data form loads */
  int64_t small[] = {3};
  tp.dims = small;
  tp.n_dims = 1;
  tp.n_float_data = 3;
  tp.float_data = few;
  load("ok_typed", &tp, msg, sizeof msg);
  CHECK(msg[0] == 0, "3 floats load: '%s'", msg);
  tp.n_float_data = 0;
  float rawf[3] = {4, 5, 6};
  tp.has_raw_data = 1;
  tp.raw_data.len = sizeof rawf;
  tp.raw_data.data = (uint8_t *)rawf;
  load("ok_raw", &tp, msg, sizeof msg);
  CHECK(msg[0] == 0, "12 raw bytes load: '%s'", msg);
  return check_summary();
}
