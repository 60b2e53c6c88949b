/* The public C API from the outside: built against the installed headers
 * and libgpuc.so alone (tests/capi/install_test.sh), no internal header.
 *   capi_test GPUC MODELS WORK
 * GPUC is the gpuc command the results are checked against, MODELS the
 * bundled models (mlp.onnx: image ?x784 -> logits), WORK a scratch folder.
 * Checks: compile through the API for sm_90 (byte-equal to the command's
 * plan), plans to and from files and bytes, queries, the CPU reference
 * against `gpuc run --cpu` (bit-exact: the same executor), and error paths
 * (bad path, bad bytes, unknown names, wrong dtype/shape, NULL arguments):
 * each a status and a message, never a crash. Prints "N passed, M failed". */
#include <gpuc/gpuc_compiler.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_test_util.h"

/* .npy v1.0, little-endian float32, C order */
static int write_npy_f32(const char *path, const float *x, int ndim, const int64_t *dims) {
  char shape[128] = "";
  int m = 0;
  for (int d = 0; d < ndim; d++) m += snprintf(shape + m, sizeof shape - (size_t)m, "%lld,", (long long)dims[d]);
  char hdr[256];
  int h = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
  int total = 10 + h + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  uint16_t hl = (uint16_t)(h + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(hdr, 1, (size_t)h, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  fwrite(x, 4, n, f);
  return fclose(f);
}

/* The float32 data of a .npy file (header checked for '<f4'); *n floats. */
static float *read_npy_f32(const char *path, size_t *n) {
  size_t len;
  char *b = read_all(path, &len);
  if (!b || len < 12 || memcmp(b, "\x93NUMPY", 6)) { free(b); return NULL; }
  size_t hl = b[6] == 1 ? (size_t)(uint8_t)b[8] | (size_t)(uint8_t)b[9] << 8 : 0;
  size_t off = 10 + hl;
  if (!hl || off > len || !strstr(b + 10, "'<f4'")) { free(b); return NULL; }
  *n = (len - off) / 4;
  float *x = malloc(len - off + 4);
  if (x) memcpy(x, b + off, len - off);
  free(b);
  return x;
}

static int other_ok;
static void *other_thread(void *arg) {
  gpuc_plan *p = NULL;
  gpuc_plan_load("/nonexistent/other-thread.gpuc", &p);
  other_ok = strstr(gpuc_last_error(), "other-thread") != NULL;
  return arg;
}

/* Threads on one plan at once, as capi_check's sessions on a GPU: the
 * plan's copy that gpuc_session_new makes (its bytes) and the session
 * itself (without a GPU: a CUDA status, a message of the thread's own). */
typedef struct Sharer {
  const gpuc_plan *plan;
  const void *bytes;             /* the plan's bytes, from the main thread */
  size_t size;
  int ok;
} Sharer;
static void *share_plan(void *arg) {
  Sharer *w = arg;
  w->ok = 1;
  for (int k = 0; k < 20; k++) {
    void *b = NULL;
    size_t n = 0;
    w->ok &= gpuc_plan_save_bytes(w->plan, &b, &n) == GPUC_OK && n == w->size && !memcmp(b, w->bytes, n);
    gpuc_free(b);
    if (gpuc_device_count() == 0) {
      gpuc_session *s = (gpuc_session *)1;
      w->ok &= gpuc_session_new(w->plan, 0, &s) == GPUC_ERR_CUDA && s == NULL && strstr(gpuc_last_error(), "CUDA");
      gpuc_session_destroy(s);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) { fprintf(stderr, "usage: capi_test GPUC MODELS WORK\n"); return 2; }
  const char *gpuc = argv[1], *models = argv[2], *work = argv[3];
  char mlp[4096], path[4096], cmd[16384];
  snprintf(mlp, sizeof mlp, "%s/mlp.onnx", models);

  /* ---- version ---- */
  CHECK(gpuc_api_version() >= GPUC_API_VERSION, "api version %d < %d", gpuc_api_version(), GPUC_API_VERSION);
  CHECK(gpuc_version() && *gpuc_version(), "gpuc_version empty");
  CHECK(gpuc_dtype_itemsize(GPUC_DTYPE_F16) == 2 && gpuc_dtype_itemsize((gpuc_dtype)99) == 0, "itemsize");
  CHECK(!strcmp(gpuc_dtype_to_string(GPUC_DTYPE_BF16), "bf16") && !strcmp(gpuc_dtype_to_string((gpuc_dtype)-3), "?"),
        "dtype names");

  /* ---- compile for sm_90, as the command does ---- */
  gpuc_compile_options o;
  gpuc_options_init(&o);
  CHECK(o.struct_size == sizeof o && o.opt_level == 2 && !o.fp16 && !o.arch, "options defaults");
  const char *shapes[] = {"image=4x784"};
  o.arch = "sm_90";
  o.shapes = shapes;
  o.num_shapes = 1;
  gpuc_plan *p = NULL;
  gpuc_status st = gpuc_compile_file(mlp, &o, &p);
  CHECK(st == GPUC_OK && p, "compile mlp for sm_90");
  if (!p) { printf("%d passed, %d failed\n", passed, failed + 1); return 1; }
  CHECK(gpuc_plan_sm(p) == 90, "plan sm %d", gpuc_plan_sm(p));
  CHECK(gpuc_plan_count(p, GPUC_INPUT) == 1 && gpuc_plan_count(p, GPUC_OUTPUT) == 1, "io counts");
  CHECK(!strcmp(gpuc_plan_name(p, GPUC_INPUT, 0), "image") && !strcmp(gpuc_plan_name(p, GPUC_OUTPUT, 0), "logits"),
        "io names");
  CHECK(gpuc_plan_dtype(p, GPUC_INPUT, 0) == GPUC_DTYPE_F32 && gpuc_plan_ndim(p, GPUC_INPUT, 0) == 2 &&
        gpuc_plan_dim(p, GPUC_INPUT, 0, 0) == 4 && gpuc_plan_dim(p, GPUC_INPUT, 0, 1) == 784, "input shape");
  gpuc_tensor info;
  CHECK(gpuc_plan_info(p, GPUC_OUTPUT, 0, &info) == GPUC_OK && info.ndim == 2 && info.dims[0] == 4 &&
        info.dims[1] == 10 && info.nbytes == 160 && !info.data, "output info");
  CHECK(gpuc_plan_index(p, GPUC_OUTPUT, "logits") == 0 && gpuc_plan_index(p, GPUC_INPUT, "logits") == -1, "index");
  snprintf(path, sizeof path, "%s/api.gpuc", work);
  CHECK(gpuc_plan_save(p, path) == GPUC_OK, "save");
  snprintf(cmd, sizeof cmd, "'%s' '%s' --arch sm_90 --shape image=4x784 -o '%s/cli.gpuc' >/dev/null", gpuc, mlp, work);
  CHECK(system(cmd) == 0, "gpuc compile");
  size_t na = 0, nc = 0;
  char *pa = read_all(path, &na);
  snprintf(path, sizeof path, "%s/cli.gpuc", work);
  char *pc = read_all(path, &nc);
  CHECK(pa && pc && na == nc && !memcmp(pa, pc, na), "the API's plan equals the command's (%zu vs %zu bytes)", na, nc);
  /* bytes round trip */
  void *bytes = NULL;
  size_t size = 0;
  CHECK(gpuc_plan_save_bytes(p, &bytes, &size) == GPUC_OK && size == na && !memcmp(bytes, pa, na), "save_bytes");
  gpuc_plan *p2 = NULL;
  CHECK(gpuc_plan_load_bytes(bytes, size, &p2) == GPUC_OK && gpuc_plan_count(p2, GPUC_INPUT) == 1, "load_bytes");
  gpuc_plan_destroy(p2);
  p2 = NULL;
  CHECK(gpuc_plan_load(path, &p2) == GPUC_OK && !strcmp(gpuc_plan_name(p2, GPUC_OUTPUT, 0), "logits"), "load");
  gpuc_plan_destroy(p2);
  /* from the model's bytes */
  size_t mn = 0;
  char *model = read_all(mlp, &mn);
  p2 = NULL;
  CHECK(model && gpuc_compile_bytes(model, mn, &o, &p2) == GPUC_OK, "compile_bytes");
  void *bytes2 = NULL;
  size_t size2 = 0;
  CHECK(p2 && gpuc_plan_save_bytes(p2, &bytes2, &size2) == GPUC_OK && size2 == size && !memcmp(bytes2, bytes, size),
        "compile_bytes gives the same plan as compile_file");
  gpuc_free(bytes2);
  gpuc_plan_destroy(p2);
  /* fp16 and -O0 compile too; fp16 with bf16 does not */
  gpuc_compile_options o16 = o;
  o16.fp16 = 1;
  p2 = NULL;
  CHECK(gpuc_compile_file(mlp, &o16, &p2) == GPUC_OK && p2, "compile --fp16");
  gpuc_plan_destroy(p2);
  o16.bf16 = 1;
  EXPECT_FAIL(gpuc_compile_file(mlp, &o16, &p2), GPUC_ERR_INVALID_ARGUMENT, "exclude each other");

  /* ---- the CPU reference against `gpuc run --cpu` ---- */
  float *x = malloc(4 * 784 * sizeof *x);
  uint64_t seed = 42;
  for (int i = 0; i < 4 * 784; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
  }
  gpuc_tensor in = {.name = "image", .dtype = GPUC_DTYPE_F32, .ndim = 2, .dims = {4, 784}, .data = x,
                    .nbytes = 4 * 784 * sizeof(float)};
  snprintf(path, sizeof path, "%s/image.npy", work);
  CHECK(write_npy_f32(path, x, 2, in.dims) == 0, "write image.npy");
  const char *variants[2][2] = {{"", "ref"}, {"--fp16", "ref16"}};
  for (int v = 0; v < 2; v++) {
    snprintf(cmd, sizeof cmd, "'%s' run '%s' --cpu %s --shape image=4x784 --input image='%s' --out '%s/%s' >/dev/null",
             gpuc, mlp, variants[v][0], path, work, variants[v][1]);
    CHECK(system(cmd) == 0, "gpuc run --cpu %s", variants[v][0]);
    char want_path[4200];
    snprintf(want_path, sizeof want_path, "%s/%s/logits.npy", work, variants[v][1]);
    size_t nw = 0;
    float *want = read_npy_f32(want_path, &nw);
    CHECK(want && nw == 40, "read %s", want_path);
    gpuc_compile_options ro;
    gpuc_options_init(&ro);
    ro.fp16 = v == 1;
    for (int how = 0; how < 2 && want; how++) { /* from the path with shapes; from bytes, shapes from the input */
      gpuc_tensor *out = NULL;
      size_t nout = 0;
      if (how == 0) { ro.shapes = shapes; ro.num_shapes = 1; st = gpuc_reference_run(mlp, &ro, &in, 1, &out, &nout); }
      else { ro.shapes = NULL; ro.num_shapes = 0; st = gpuc_reference_run_bytes(model, mn, &ro, &in, 1, &out, &nout); }
      CHECK(st == GPUC_OK && nout == 1, "reference run %s (%s)", variants[v][0], how ? "bytes" : "path");
      if (st != GPUC_OK || nout != 1) continue;
      CHECK(!strcmp(out[0].name, "logits") && out[0].dtype == GPUC_DTYPE_F32 && out[0].ndim == 2 &&
            out[0].dims[0] == 4 && out[0].dims[1] == 10 && out[0].nbytes == 160, "reference output description");
      /* the same executor on the same graph: bit-exact (f32) */
      CHECK(out[0].data && !memcmp(out[0].data, want, 160), "reference %s equals gpuc run --cpu", variants[v][0]);
      gpuc_tensors_free(out, nout);
    }
    free(want);
  }
  gpuc_tensor *mi = NULL;
  size_t nmi = 0;
  CHECK(gpuc_model_inputs(mlp, NULL, &mi, &nmi) == GPUC_OK && nmi == 1 && !strcmp(mi[0].name, "image") &&
        mi[0].ndim == 2 && mi[0].dims[0] == -1 && mi[0].dims[1] == 784, "model inputs: image ?x784");
  gpuc_tensors_free(mi, nmi);

  /* ---- error paths: a status and a message naming the file, tensor or reason ---- */
  gpuc_plan *bad = (gpuc_plan *)0;
  EXPECT_FAIL(gpuc_plan_load("/nonexistent/x.gpuc", &bad), GPUC_ERR_BAD_INPUT, "/nonexistent/x.gpuc");
  CHECK(bad == NULL, "no plan on failure");
  EXPECT_FAIL(gpuc_plan_load_bytes("not a plan at all, just some bytes of text that go on for long enough", 70, &bad),
              GPUC_ERR_BAD_INPUT, "not a gpuc plan");
  EXPECT_FAIL(gpuc_plan_load_bytes(pa, na - 100, &bad), GPUC_ERR_BAD_INPUT, "truncated");
  pa[na / 2] ^= 0x5a;
  EXPECT_FAIL(gpuc_plan_load_bytes(pa, na, &bad), GPUC_ERR_BAD_INPUT, "checksum");
  EXPECT_FAIL(gpuc_plan_load_bytes(pa, 3, &bad), GPUC_ERR_BAD_INPUT, "too short");
  EXPECT_FAIL(gpuc_compile_file("/nonexistent/m.onnx", &o, &bad), GPUC_ERR_BAD_INPUT, "/nonexistent/m.onnx");
  EXPECT_FAIL(gpuc_compile_bytes("\x08\x07garbage", 9, &o, &bad), GPUC_ERR_BAD_INPUT, "<onnx bytes>");
  EXPECT_FAIL(gpuc_compile_bytes(model, 0, &o, &bad), GPUC_ERR_BAD_INPUT, "empty");
  EXPECT_FAIL(gpuc_compile_bytes(model, mn / 2, &o, &bad), GPUC_ERR_BAD_INPUT, "<onnx bytes>");
  gpuc_compile_options ob = o;
  const char *bad_shape[] = {"image=4xq"};
  ob.shapes = bad_shape;
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "bad dim");
  const char *no_input[] = {"nosuch=1x784"};
  ob.shapes = no_input;
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_BAD_INPUT, "nosuch");
  ob = o;
  ob.arch = "sm_1";
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "sm_1");
  ob = o;
  ob.prune = "3:5";
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "3:5");
  ob = o;
  ob.int8_skip = "fc1";
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "--int8");
  ob = o;
  ob.opt_level = 7;
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "opt_level");
  ob = o;
  ob.struct_size = 8;
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "gpuc_options_init");
  ob = o;
  ob.num_shapes = 2;
  ob.shapes = NULL;
  EXPECT_FAIL(gpuc_compile_file(mlp, &ob, &bad), GPUC_ERR_INVALID_ARGUMENT, "shapes");
  CHECK(bad == NULL, "no plan after failed compiles");
  /* reference: unknown name, wrong dtype, wrong shape, wrong size, missing input */
  gpuc_tensor *out = NULL;
  size_t nout = 7;
  gpuc_compile_options ro;
  gpuc_options_init(&ro);
  ro.shapes = shapes;
  ro.num_shapes = 1;
  gpuc_tensor w = in;
  w.name = "imgae";
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_NOT_FOUND, "imgae");
  CHECK(out == NULL && nout == 0, "no outputs on failure");
  w = in;
  w.dtype = GPUC_DTYPE_F64;
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_MISMATCH, "f64");
  w = in;
  w.dims[0] = 3;
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_MISMATCH, "3x784");
  w = in;
  w.ndim = 99;
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_MISMATCH, "image");
  w = in;
  w.nbytes = 12;
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_MISMATCH, "nbytes");
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, NULL, 0, &out, &nout), GPUC_ERR_INVALID_ARGUMENT, "not given");
  gpuc_tensor two[2] = {in, in};
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, two, 2, &out, &nout), GPUC_ERR_INVALID_ARGUMENT, "twice");
  w = in;
  w.data = NULL;
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &w, 1, &out, &nout), GPUC_ERR_INVALID_ARGUMENT, "data is NULL");
  EXPECT_FAIL(gpuc_reference_run("/nonexistent/r.onnx", &ro, &in, 1, &out, &nout), GPUC_ERR_BAD_INPUT, "r.onnx");
  /* queries out of range */
  CHECK(gpuc_plan_name(p, GPUC_INPUT, 5) == NULL && strstr(gpuc_last_error(), "input 5 of 1"), "name out of range");
  CHECK(gpuc_plan_dim(p, GPUC_INPUT, 0, 2) == -1 && strstr(gpuc_last_error(), "no axis 2"), "axis out of range");
  CHECK(gpuc_plan_dtype(p, (gpuc_io)5, 0) == GPUC_DTYPE_UNDEFINED, "bad io");
  EXPECT_FAIL(gpuc_plan_info(p, GPUC_OUTPUT, 1, &info), GPUC_ERR_NOT_FOUND, "output 1 of 1");
  EXPECT_FAIL(gpuc_plan_save(p, "/nonexistent/dir/p.gpuc"), GPUC_ERR_BAD_INPUT, "/nonexistent/dir/p.gpuc");
  /* NULL arguments everywhere */
  EXPECT_FAIL(gpuc_plan_load(NULL, &bad), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_load(path, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_load_bytes(NULL, 10, &bad), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_save(NULL, path), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_save(p, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_save_bytes(p, NULL, &size), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_info(NULL, GPUC_INPUT, 0, &info), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_plan_info(p, GPUC_INPUT, 0, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(gpuc_plan_count(NULL, GPUC_INPUT) == 0 && gpuc_plan_name(NULL, GPUC_INPUT, 0) == NULL &&
        gpuc_plan_ndim(NULL, GPUC_INPUT, 0) == -1 && gpuc_plan_index(NULL, GPUC_INPUT, "image") == -1 &&
        gpuc_plan_index(p, GPUC_INPUT, NULL) == -1 && gpuc_plan_sm(NULL) == -1, "NULL plan queries");
  EXPECT_FAIL(gpuc_compile_file(NULL, &o, &bad), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_compile_file(mlp, &o, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_compile_bytes(NULL, 5, &o, &bad), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_reference_run(NULL, &ro, &in, 1, &out, &nout), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, &in, 1, NULL, &nout), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_reference_run(mlp, &ro, NULL, 1, &out, &nout), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_model_inputs(NULL, NULL, &mi, &nmi), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_new(NULL, 0, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_new(p, 0, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_run(NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_run_async(NULL, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_bind_input(NULL, "image", x, GPUC_MEMORY_HOST, GPUC_DTYPE_F32, 2, in.dims),
              GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_bind_output(NULL, "logits", x, GPUC_MEMORY_HOST, GPUC_DTYPE_F32, 2, in.dims),
              GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_fetch_output(NULL, "logits", x, 160), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_buffer(NULL, GPUC_INPUT, "image", (void **)&bad), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_benchmark(NULL, 1, 1, NULL, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_unbind_all(NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_poll_errors(NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_gpu(NULL, NULL, 0, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_device_sm(0, NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_get_stats(NULL, &(gpuc_session_stats){0}, sizeof(gpuc_session_stats)),
              GPUC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_FAIL(gpuc_session_reset_stats(NULL), GPUC_ERR_INVALID_ARGUMENT, "NULL");
  /* zero-copy: the plan's rules need no GPU (mlp: its input and output may
   * be bound in place) */
  {
    const char *why = NULL;
    CHECK(gpuc_plan_in_place(p, GPUC_INPUT, 0, &why) == 1 && why && strstr(why, "in place"), "mlp's input in place");
    CHECK(gpuc_plan_in_place(p, GPUC_OUTPUT, 0, NULL) == 1, "mlp's output in place");
    CHECK(gpuc_plan_in_place(p, GPUC_OUTPUT, 1, &why) == -1 && !why && strstr(gpuc_last_error(), "output 1 of 1"),
          "in_place: index out of range: %s", gpuc_last_error());
    CHECK(gpuc_plan_in_place(NULL, GPUC_INPUT, 0, &why) == -1 && strstr(gpuc_last_error(), "NULL"), "in_place: NULL");
    CHECK(gpuc_plan_in_place(p, (gpuc_io)3, 0, &why) == -1, "in_place: bad io");
  }
  CHECK(gpuc_session_plan_of(NULL) == NULL, "plan_of NULL");
  gpuc_session_destroy(NULL);
  gpuc_plan_destroy(NULL);
  gpuc_free(NULL);
  gpuc_tensors_free(NULL, 3);
  gpuc_options_init(NULL);
  /* a session: with no GPU here, a CUDA status and a message */
  if (gpuc_device_count() == 0) {
    gpuc_session *s = (gpuc_session *)0;
    st = gpuc_session_new(p, 0, &s);
    CHECK(st == GPUC_ERR_CUDA && s == NULL && *gpuc_last_error(), "session without a GPU: %s", gpuc_status_name(st));
    EXPECT_FAIL(gpuc_device_sm(0, &(int){0}), GPUC_ERR_CUDA, "no CUDA device 0");
    gpuc_compile_options on = o;
    on.arch = NULL; /* the present GPU: none */
    EXPECT_FAIL(gpuc_compile_file(mlp, &on, &bad), GPUC_ERR_CUDA, "no GPU here");
  }
  /* the message is per thread */
  EXPECT_FAIL(gpuc_plan_load("/nonexistent/main-thread.gpuc", &bad), GPUC_ERR_BAD_INPUT, "main-thread");
  pthread_t th;
  CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0 && pthread_join(th, NULL) == 0 && other_ok,
        "other thread's message");
  CHECK(strstr(gpuc_last_error(), "main-thread") != NULL, "main thread's message kept: %s", gpuc_last_error());
  CHECK(!strcmp(gpuc_status_name(GPUC_ERR_MISMATCH), "GPUC_ERR_MISMATCH"), "status name");
  { /* four threads on one plan */
    void *pb = NULL;
    size_t pn = 0;
    CHECK(gpuc_plan_save_bytes(p, &pb, &pn) == GPUC_OK, "plan bytes for the threads");
    Sharer sw[4];
    pthread_t st4[4];
    int made = 0;
    for (int k = 0; k < 4; k++) {
      sw[k] = (Sharer){.plan = p, .bytes = pb, .size = pn};
      made += pthread_create(&st4[k], NULL, share_plan, &sw[k]) == 0;
    }
    int all = made == 4;
    for (int k = 0; k < made; k++) all &= pthread_join(st4[k], NULL) == 0 && sw[k].ok;
    CHECK(all, "4 threads: the plan's bytes and gpuc_session_new on one plan at once");
    gpuc_free(pb);
  }

  gpuc_free(bytes);
  free(pa);
  free(pc);
  free(model);
  free(x);
  gpuc_plan_destroy(p);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
