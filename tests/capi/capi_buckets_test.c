/* Bucket plans through the public C API, without a GPU (the runs are
 * tests/gpu/capi_check.sh's): plans compiled with ranges by
 * gpuc_compile_file for sm_90, byte-equal to the command's; the range and
 * bucket queries; gpuc_plan_resolve (the rule every session run uses:
 * which bucket, its padded dims, the outputs' actual dims) and its
 * refusals, each GPUC_ERR_MISMATCH with the range or sizes named; options
 * of API 1 still taken; a session needs a GPU (GPUC_ERR_CUDA here).
 *   capi_buckets_test GPUC MODELS ZOO WORK
 * mlp.onnx: image [batch, 784] -> logits [batch, 10]; tiny_bert_ts.onnx:
 * input_ids, attention_mask [batch, seq] i64 -> output [batch, seq, 32]. */
#include <gpuc/gpuc_compiler.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_test_util.h"

static gpuc_plan *compile_ranged(const char *model, const char *const *shapes, size_t nshapes,
                                 const char *const *buckets, size_t nbuckets) {
  gpuc_compile_options o;
  gpuc_options_init(&o);
  o.arch = "sm_90";
  o.shapes = shapes;
  o.num_shapes = nshapes;
  o.buckets = buckets;
  o.num_buckets = nbuckets;
  gpuc_plan *p = NULL;
  gpuc_status st = gpuc_compile_file(model, &o, &p);
  CHECK(st == GPUC_OK && p, "compile %s with ranges: %s", model, gpuc_status_name(st));
  return p;
}

/* The API's plan bytes against `gpuc MODEL --shape ... --buckets ...`'s file. */
static void same_as_cli(const gpuc_plan *p, const char *gpuc, const char *args, const char *work, const char *tag) {
  char out[4096], cmd[8192];
  snprintf(out, sizeof out, "%s/%s_cli.gpuc", work, tag);
  snprintf(cmd, sizeof cmd, "%s %s --arch sm_90 -o %s >/dev/null", gpuc, args, out);
  CHECK(system(cmd) == 0, "%s", cmd);
  size_t n = 0, m = 0;
  char *a = read_all(out, &n);
  void *b = NULL;
  CHECK(gpuc_plan_save_bytes(p, &b, &m) == GPUC_OK, "save_bytes");
  CHECK(a && b && n == m && !memcmp(a, b, n), "%s: the API's bucket plan (%zu bytes) equals the command's (%zu)", tag,
        m, n);
  free(a);
  gpuc_free(b);
}

static gpuc_tensor feed(const char *name, gpuc_dtype dt, int ndim, int64_t d0, int64_t d1) {
  gpuc_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.dtype = dt;
  t.ndim = ndim;
  t.dims[0] = d0;
  t.dims[1] = d1;
  return t;
}

static void test_mlp(const char *gpuc, const char *models, const char *work) {
  char model[4096], args[8192];
  snprintf(model, sizeof model, "%s/mlp.onnx", models);
  const char *shapes[] = {"image=1..64x784"};
  const char *buckets[] = {"1,16"};
  gpuc_plan *p = compile_ranged(model, shapes, 1, buckets, 1);
  if (!p) return;
  snprintf(args, sizeof args, "%s --shape image=1..64x784 --buckets 1,16", model);
  same_as_cli(p, gpuc, args, work, "mlp");
  CHECK(gpuc_plan_bucket_count(p) == 3, "mlp: 3 buckets (1, 16, 64), got %zu", gpuc_plan_bucket_count(p));
  CHECK(gpuc_plan_dim(p, GPUC_INPUT, 0, 0) == 64, "plan queries report the largest shape");
  int64_t lo = 0, hi = 0;
  gpuc_dim_kind kind = GPUC_DIM_FIXED;
  CHECK(gpuc_plan_dim_range(p, GPUC_INPUT, 0, 0, &lo, &hi, &kind) == GPUC_OK && lo == 1 && hi == 64 &&
        kind == GPUC_DIM_BATCH, "image dim 0: 1..64 batch (got %lld..%lld kind %d)", (long long)lo, (long long)hi, kind);
  CHECK(gpuc_plan_dim_range(p, GPUC_INPUT, 0, 1, &lo, &hi, &kind) == GPUC_OK && lo == 784 && hi == 784 &&
        kind == GPUC_DIM_FIXED, "image dim 1: fixed 784");
  CHECK(gpuc_plan_dim_range(p, GPUC_OUTPUT, 0, 0, &lo, &hi, &kind) == GPUC_OK && lo == 1 && hi == 64 &&
        kind == GPUC_DIM_BATCH, "logits dim 0 follows the batch");
  EXPECT_FAIL(gpuc_plan_dim_range(p, GPUC_INPUT, 0, 2, &lo, &hi, NULL), GPUC_ERR_NOT_FOUND, "no axis 2");
  EXPECT_FAIL(gpuc_plan_dim_range(NULL, GPUC_INPUT, 0, 0, &lo, &hi, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  static const int64_t want_b[3] = {1, 16, 64};
  for (size_t b = 0; b < 3; b++) {
    int nd = 0;
    int64_t dims[GPUC_MAX_DIMS] = {0};
    CHECK(gpuc_plan_bucket_dims(p, b, GPUC_INPUT, 0, &nd, dims) == GPUC_OK && nd == 2 && dims[0] == want_b[b] &&
          dims[1] == 784, "bucket %zu: image [%lld x 784] (got [%lld x %lld])", b, (long long)want_b[b],
          (long long)dims[0], (long long)dims[1]);
    CHECK(gpuc_plan_bucket_dims(p, b, GPUC_OUTPUT, 0, &nd, dims) == GPUC_OK && nd == 2 && dims[0] == want_b[b] &&
          dims[1] == 10, "bucket %zu: logits [%lld x 10]", b, (long long)want_b[b]);
  }
  int nd;
  int64_t dims[GPUC_MAX_DIMS];
  EXPECT_FAIL(gpuc_plan_bucket_dims(p, 3, GPUC_INPUT, 0, &nd, dims), GPUC_ERR_NOT_FOUND, "bucket 3 of 3");
  /* which bucket each batch runs in, and the outputs' actual dims */
  static const int64_t batch[6] = {1, 2, 5, 16, 17, 64}, bucket_of[6] = {0, 1, 1, 1, 2, 2};
  for (int i = 0; i < 6; i++) {
    gpuc_tensor in = feed("image", GPUC_DTYPE_F32, 2, batch[i], 784), out;
    size_t b = 99;
    CHECK(gpuc_plan_resolve(p, &in, 1, &b, &out) == GPUC_OK && b == (size_t)bucket_of[i] && out.ndim == 2 &&
          out.dims[0] == batch[i] && out.dims[1] == 10 && out.nbytes == (size_t)batch[i] * 10 * 4 &&
          !strcmp(out.name, "logits"), "batch %lld runs in bucket %lld, logits [%lld x 10] (got bucket %zu)",
          (long long)batch[i], (long long)bucket_of[i], (long long)batch[i], b);
  }
  gpuc_tensor in = feed("image", GPUC_DTYPE_F32, 2, 65, 784);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, NULL, NULL), GPUC_ERR_MISMATCH, "outside the range 1..64");
  in = feed("image", GPUC_DTYPE_F32, 2, 0, 784);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, NULL, NULL), GPUC_ERR_MISMATCH, "outside the range 1..64");
  in = feed("image", GPUC_DTYPE_F32, 2, 8, 783);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, NULL, NULL), GPUC_ERR_MISMATCH, "compiled for 784");
  in = feed("image", GPUC_DTYPE_F16, 2, 8, 784);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, NULL, NULL), GPUC_ERR_MISMATCH, "compiled for f32");
  in = feed("pixels", GPUC_DTYPE_F32, 2, 8, 784);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, NULL, NULL), GPUC_ERR_NOT_FOUND, "no input named 'pixels'");
  EXPECT_FAIL(gpuc_plan_resolve(p, NULL, 0, NULL, NULL), GPUC_ERR_STATE, "input 'image' not given");
  /* a session needs the GPU; the plan's copy through bytes keeps its buckets */
  gpuc_session *s = NULL;
  if (gpuc_device_count() == 0) EXPECT_FAIL(gpuc_session_new(p, 0, &s), GPUC_ERR_CUDA, "CUDA device");
  void *bytes = NULL;
  size_t n = 0;
  gpuc_plan *q = NULL;
  CHECK(gpuc_plan_save_bytes(p, &bytes, &n) == GPUC_OK && gpuc_plan_load_bytes(bytes, n, &q) == GPUC_OK &&
        gpuc_plan_bucket_count(q) == 3, "a bucket plan through bytes keeps its 3 buckets");
  gpuc_free(bytes);
  gpuc_plan_destroy(q);
  gpuc_plan_destroy(p);
  /* a one-shape plan: one bucket, every dim fixed, resolve wants its shape */
  const char *one[] = {"image=8x784"};
  gpuc_compile_options o;
  gpuc_options_init(&o);
  o.arch = "sm_90";
  o.shapes = one;
  o.num_shapes = 1;
  CHECK(gpuc_compile_file(model, &o, &p) == GPUC_OK, "one-shape compile");
  CHECK(gpuc_plan_bucket_count(p) == 1, "a one-shape plan has 1 bucket");
  CHECK(gpuc_plan_dim_range(p, GPUC_INPUT, 0, 0, &lo, &hi, &kind) == GPUC_OK && lo == 8 && hi == 8 &&
        kind == GPUC_DIM_FIXED, "a one-shape plan's dims are fixed");
  in = feed("image", GPUC_DTYPE_F32, 2, 8, 784);
  size_t b = 9;
  CHECK(gpuc_plan_resolve(p, &in, 1, &b, NULL) == GPUC_OK && b == 0, "one shape: bucket 0");
  in = feed("image", GPUC_DTYPE_F32, 2, 4, 784);
  EXPECT_FAIL(gpuc_plan_resolve(p, &in, 1, &b, NULL), GPUC_ERR_MISMATCH, "compiled for [8x784]");
  gpuc_plan_destroy(p);
  /* an options struct of API 1 (no buckets fields) is still taken; a range in it too */
  o.struct_size = offsetof(gpuc_compile_options, buckets);
  o.shapes = shapes;
  CHECK(gpuc_compile_file(model, &o, &p) == GPUC_OK && gpuc_plan_bucket_count(p) == 7,
        "API 1 options with a range: the default buckets 1,2,4,..,64 (got %zu)", p ? gpuc_plan_bucket_count(p) : 0);
  gpuc_plan_destroy(p);
  o.struct_size = sizeof o;
  o.shapes = one;
  o.buckets = buckets;
  o.num_buckets = 1;
  EXPECT_FAIL(gpuc_compile_file(model, &o, &p), GPUC_ERR_INVALID_ARGUMENT, "buckets need a range");
  const char *bad_range[] = {"image=9..4x784"};
  o.shapes = bad_range;
  o.num_buckets = 0;
  EXPECT_FAIL(gpuc_compile_file(model, &o, &p), GPUC_ERR_INVALID_ARGUMENT, "LO..HI");
  const char *bad_list[] = {"1,99"};
  o.shapes = shapes;
  o.buckets = bad_list;
  o.num_buckets = 1;
  EXPECT_FAIL(gpuc_compile_file(model, &o, &p), GPUC_ERR_BAD_INPUT, "outside its range 1..64");
}

static void test_bert(const char *gpuc, const char *zoo, const char *work) {
  char model[4096], args[8192];
  snprintf(model, sizeof model, "%s/tiny_bert_ts.onnx", zoo);
  const char *shapes[] = {"input_ids=1..4x4..16", "attention_mask=1..4x4..16"};
  const char *buckets[] = {"1x4,2x8,4x8"};
  gpuc_plan *p = compile_ranged(model, shapes, 2, buckets, 1);
  if (!p) return;
  snprintf(args, sizeof args, "%s --shape input_ids=1..4x4..16 --shape attention_mask=1..4x4..16 --buckets 1x4,2x8,4x8",
           model);
  same_as_cli(p, gpuc, args, work, "tiny_bert");
  CHECK(gpuc_plan_bucket_count(p) == 4, "tiny_bert: 1x4, 2x8, 4x8 and the top 4x16 (got %zu)", gpuc_plan_bucket_count(p));
  int64_t lo, hi;
  gpuc_dim_kind kind;
  CHECK(gpuc_plan_dim_range(p, GPUC_INPUT, 0, 1, &lo, &hi, &kind) == GPUC_OK && lo == 4 && hi == 16 &&
        kind == GPUC_DIM_MASKED, "input_ids dim 1: 4..16, masked (kind %d)", kind);
  CHECK(gpuc_plan_dim_range(p, GPUC_OUTPUT, 0, 2, &lo, &hi, &kind) == GPUC_OK && lo == 32 && hi == 32 &&
        kind == GPUC_DIM_FIXED, "output dim 2: 32");
  gpuc_tensor in[2] = {feed("attention_mask", GPUC_DTYPE_I64, 2, 3, 5), feed("input_ids", GPUC_DTYPE_I64, 2, 3, 5)};
  gpuc_tensor out;
  size_t b = 99;
  CHECK(gpuc_plan_resolve(p, in, 2, &b, &out) == GPUC_OK && b == 2 && out.ndim == 3 && out.dims[0] == 3 &&
        out.dims[1] == 5 && out.dims[2] == 32, "3x5 (inputs in any order) runs in 4x8 (bucket 2), output [3x5x32] "
        "(got bucket %zu)", b);
  int nd;
  int64_t dims[GPUC_MAX_DIMS];
  CHECK(gpuc_plan_bucket_dims(p, b, GPUC_INPUT, 1, &nd, dims) == GPUC_OK && nd == 2 && dims[0] == 4 && dims[1] == 8,
        "its padded mask is [4x8]");
  in[0].dims[1] = 6;
  EXPECT_FAIL(gpuc_plan_resolve(p, in, 2, &b, NULL), GPUC_ERR_MISMATCH, "but input");
  in[0].dims[1] = 17;
  in[1].dims[1] = 17;
  EXPECT_FAIL(gpuc_plan_resolve(p, in, 2, &b, NULL), GPUC_ERR_MISMATCH, "outside the range 4..16");
  in[0].dims[0] = in[1].dims[0] = 2;
  in[0].dims[1] = in[1].dims[1] = 12;
  CHECK(gpuc_plan_resolve(p, in, 2, &b, NULL) == GPUC_OK && b == 3, "2x12 runs in the 4x16 bucket (got %zu)", b);
  gpuc_plan_destroy(p);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: capi_buckets_test GPUC MODELS ZOO WORK\n");
    return 2;
  }
  test_mlp(argv[1], argv[2], argv[4]);
  test_bert(argv[1], argv[3], argv[4]);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
