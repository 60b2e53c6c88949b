/* Unit tests of the IR basics: f16/bf16 conversions, shape arithmetic and
 * the allocation cap, the reference broadcast map and GEMMs, .npy files.
 * Self-checking: prints each failure, then "N passed, N failed"; exits
 * non-zero when anything failed. */
#include "ir.h"
#include "npy.h"
#include "ref_util.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"


static float bits_f32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }

/* ---- f16 ------------------------------------------------------------------ */

/* Value of an f16 bit pattern computed from the definition (non-NaN). */
static double f16_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? INFINITY : ldexp(man | 0x400, exp - 25);
  return sign ? -v : v;
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void test_f16_all_patterns(void) {
  int bad_value = 0, bad_trip = 0, bad_nan = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = gpuc_f16_to_f32((uint16_t)h);
    if (f16_is_nan((uint16_t)h)) {
      if (!isnan(f) || !f16_is_nan(gpuc_f32_to_f16(f))) bad_nan++;
      continue;
    }
    if ((double)f != f16_value((uint16_t)h) || (signbit(f) != 0) != ((h >> 15) != 0)) bad_value++;
    if (gpuc_f32_to_f16(f) != h) bad_trip++;
  }
  CHECK(bad_value == 0, "f16->f32: %d patterns decode to a wrong value", bad_value);
  CHECK(bad_trip == 0, "f16->f32->f16: %d non-NaN patterns do not round-trip", bad_trip);
  CHECK(bad_nan == 0, "f16 NaN: %d NaN patterns do not stay NaN", bad_nan);
}

static void test_f16_rounding(void) {
  static const struct { float f; uint16_t h; const char *what; } cases[] = {
    {1.0f, 0x3c00, "1"},
    {-2.0f, 0xc000, "-2"},
    {0.0f, 0x0000, "+0"},
    {-0.0f, 0x8000, "-0"},
    {65504.0f, 0x7bff, "largest finite"},
    {65519.0f, 0x7bff, "below the overflow midpoint"},
    {65520.0f, 0x7c00, "overflow midpoint ties to even (inf)"},
    {1e5f, 0x7c00, "overflow"},
    {-1e5f, 0xfc00, "negative overflow"},
    {FLT_MAX, 0x7c00, "FLT_MAX"},
    {INFINITY, 0x7c00, "inf"},
    {-INFINITY, 0xfc00, "-inf"},
    {1.0f + 0x1p-11f, 0x3c00, "tie down to even"},
    {1.0f + 3 * 0x1p-11f, 0x3c02, "tie up to even"},
    {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "just above a tie"},
    {1.0f + 0x1p-11f - 0x1p-22f, 0x3c00, "just below a tie"},
    {0x1p-24f, 0x0001, "smallest subnormal"},
    {0x1p-25f, 0x0000, "half the smallest subnormal ties to 0"},
    {0x1.8p-25f, 0x0001, "0.75 of the smallest subnormal"},
    {3 * 0x1p-25f, 0x0002, "subnormal tie up to even"},
    {5 * 0x1p-25f, 0x0002, "subnormal tie down to even"},
    {1023 * 0x1p-24f, 0x03ff, "largest subnormal"},
    {1023.5f * 0x1p-24f, 0x0400, "subnormal/normal boundary tie"},
    {0x1p-14f, 0x0400, "smallest normal"},
    {1e-10f, 0x0000, "underflow"},
    {-1e-10f, 0x8000, "negative underflow"},
    {0.1f, 0x2e66, "0.1"},
    {3.14159265f, 0x4248, "pi"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint16_t h = gpuc_f32_to_f16(cases[i].f);
    CHECK(h == cases[i].h, "f32->f16 %s (%a): got 0x%04x, want 0x%04x", cases[i].what,
          (double)cases[i].f, h, cases[i].h);
  }
  CHECK(f16_is_nan(gpuc_f32_to_f16(NAN)), "f32->f16 NaN is not NaN");
  CHECK(f16_is_nan(gpuc_f32_to_f16(bits_f32(0x7f800001u))),
        "f32->f16 NaN with only a low mantissa bit becomes 0x%04x",
        gpuc_f32_to_f16(bits_f32(0x7f800001u)));
  CHECK(f16_is_nan(gpuc_f32_to_f16(bits_f32(0xffc00000u))), "f32->f16 -NaN is not NaN");
}

/* ---- bf16 ----------------------------------------------------------------- */

static void test_bf16(void) {
  int bad_trip = 0, bad_nan = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = gpuc_bf16_to_f32((uint16_t)h);
    uint32_t fb;
    memcpy(&fb, &f, 4);
    bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (is_nan) {
      uint16_t back = gpuc_f32_to_bf16(f);
      if (!isnan(f) || !((back & 0x7f80) == 0x7f80 && (back & 0x7f))) bad_nan++;
      continue;
    }
    if (fb != h << 16 || gpuc_f32_to_bf16(f) != h) bad_trip++;
  }
  CHECK(bad_trip == 0, "bf16->f32->bf16: %d non-NaN patterns do not round-trip", bad_trip);
  CHECK(bad_nan == 0, "bf16 NaN: %d NaN patterns do not stay NaN", bad_nan);
  static const struct { float f; uint16_t h; const char *what; } cases[] = {
    {1.0f, 0x3f80, "1"},
    {-0.0f, 0x8000, "-0"},
    {1.0f + 0x1p-8f, 0x3f80, "tie down to even"},
    {1.0f + 3 * 0x1p-8f, 0x3f82, "tie up to even"},
    {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81, "just above a tie"},
    {FLT_MAX, 0x7f80, "FLT_MAX rounds to inf"},
    {-INFINITY, 0xff80, "-inf"},
    {0x1p-133f, 0x0001, "subnormal"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint16_t h = gpuc_f32_to_bf16(cases[i].f);
    CHECK(h == cases[i].h, "f32->bf16 %s: got 0x%04x, want 0x%04x", cases[i].what, h,
          cases[i].h);
  }
  /* a NaN whose payload sits in the low 16 bits must not truncate to inf */
  uint16_t h = gpuc_f32_to_bf16(bits_f32(0x7f800001u));
  CHECK((h & 0x7f80) == 0x7f80 && (h & 0x7f), "f32->bf16 low-payload NaN became 0x%04x", h);
}

/* ---- shapes and allocation ------------------------------------------------ */

static void test_numel(void) {
  int64_t d1[] = {2, 3, 4};
  CHECK(gpuc_shape_numel(3, d1) == 24, "numel 2x3x4");
  CHECK(gpuc_shape_numel(0, NULL) == 1, "numel of a scalar");
  int64_t d0[] = {5, 0, 7};
  CHECK(gpuc_shape_numel(3, d0) == 0, "numel with a 0 dim");
  int64_t ov1[] = {INT64_MAX / 2 + 1, 2};
  CHECK(gpuc_shape_numel(2, ov1) == -1, "numel overflow at INT64_MAX");
  int64_t ov2[] = {(int64_t)1 << 32, (int64_t)1 << 31};
  CHECK(gpuc_shape_numel(2, ov2) == -1, "numel overflow 2^63");
  int64_t ok2[] = {(int64_t)1 << 31, (int64_t)1 << 31};
  CHECK(gpuc_shape_numel(2, ok2) == (int64_t)1 << 62, "numel 2^62 does not overflow");
  int64_t ov3[] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
  CHECK(gpuc_shape_numel(4, ov3) == -1, "numel overflow over several dims");
  int64_t neg[] = {3, -1};
  CHECK(gpuc_shape_numel(2, neg) == -1, "numel with an unknown dim");
  int64_t big[GPUC_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(gpuc_shape_numel(GPUC_MAX_RANK + 1, big) == -1, "numel past the max rank");
  CHECK(gpuc_shape_numel(-1, NULL) == -1, "numel of unknown rank");
  Tensor t = {.dt = GPUC_DT_F32, .rank = -1};
  CHECK(gpuc_numel(&t) == -1, "gpuc_numel of unknown rank");
}

static void test_alloc(void) {
  GpucErr e = {0};
  /* one element past the cap */
  Tensor t = {.dt = GPUC_DT_F32, .rank = 1, .dims = {GPUC_MAX_TENSOR_BYTES / 4 + 1}};
  CHECK(gpuc_tensor_alloc(&t, &e) == -1 && t.data == NULL && e.msg[0],
        "alloc just over the cap must fail with a message");
  Tensor t2 = {.dt = GPUC_DT_F64, .rank = 3, .dims = {1 << 20, 1 << 20, 1 << 20}};
  e.msg[0] = 0;
  CHECK(gpuc_tensor_alloc(&t2, &e) == -1 && t2.data == NULL && e.msg[0],
        "alloc of 2^60 f64 must fail");
  Tensor t3 = {.dt = GPUC_DT_I64, .rank = 2, .dims = {INT64_MAX / 4, 4}};
  CHECK(gpuc_tensor_alloc(&t3, &e) == -1 && t3.data == NULL, "alloc with numel overflow");
  Tensor t4 = {.dt = GPUC_DT_F32, .rank = 2, .dims = {3, -1}};
  CHECK(gpuc_tensor_alloc(&t4, &e) == -1 && t4.data == NULL, "alloc of an unknown shape");
  Tensor t5 = {.dt = GPUC_DT_UNDEF, .rank = 1, .dims = {3}};
  CHECK(gpuc_tensor_alloc(&t5, &e) == -1 && t5.data == NULL, "alloc of dtype undef");
  int64_t d[] = {GPUC_MAX_TENSOR_BYTES};
  CHECK(gpuc_tensor_new(GPUC_DT_U16, 1, d, &e) == NULL, "tensor_new over the cap");
  CHECK(gpuc_tensor_new(GPUC_DT_U8, GPUC_MAX_RANK + 1, d, &e) == NULL, "tensor_new bad rank");
  int64_t small[] = {2, 3};
  Tensor *ok = gpuc_tensor_new(GPUC_DT_F32, 2, small, &e);
  CHECK(ok && ok->data && gpuc_tensor_bytes(ok) == 24, "small tensor_new");
  bool zeroed = ok != NULL;
  for (int i = 0; ok && i < 6; i++) zeroed &= ((float *)ok->data)[i] == 0;
  CHECK(zeroed, "tensor_new data is zeroed");
  gpuc_tensor_free(ok);
  int64_t empty[] = {4, 0};
  Tensor *z = gpuc_tensor_new(GPUC_DT_F32, 2, empty, &e);
  CHECK(z && z->data, "tensor_new of an empty shape gives a non-NULL buffer");
  gpuc_tensor_free(z);
}

/* ---- broadcast map -------------------------------------------------------- */

/* map[i] computed the obvious way: unravel i in out, drop the leading dims
 * in lacks, clamp broadcast (size 1) dims to 0, ravel in in. */
static int64_t naive_bcast(const Tensor *in, const Tensor *out, int64_t i) {
  int64_t idx[GPUC_MAX_RANK];
  for (int d = out->rank - 1; d >= 0; d--) { idx[d] = i % out->dims[d]; i /= out->dims[d]; }
  int off = out->rank - in->rank;
  int64_t pos = 0;
  for (int d = 0; d < in->rank; d++)
    pos = pos * in->dims[d] + (in->dims[d] == 1 ? 0 : idx[d + off]);
  return pos;
}

static void test_bcast(void) {
  static const struct { int rin; int64_t in[4]; int rout; int64_t out[4]; } cases[] = {
    {2, {3, 1}, 3, {2, 3, 4}},
    {0, {0}, 2, {2, 3}},
    {1, {4}, 2, {3, 4}},
    {3, {2, 1, 4}, 3, {2, 3, 4}},
    {1, {1}, 1, {5}},
    {3, {2, 3, 4}, 3, {2, 3, 4}},
    {4, {1, 3, 1, 5}, 4, {2, 3, 4, 5}},
    {2, {1, 1}, 4, {2, 2, 3, 3}},
    {2, {3, 1}, 3, {0, 3, 4}},
    {0, {0}, 0, {0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    Tensor in = {.dt = GPUC_DT_F32, .rank = cases[c].rin};
    Tensor out = {.dt = GPUC_DT_F32, .rank = cases[c].rout};
    memcpy(in.dims, cases[c].in, sizeof cases[c].in);
    memcpy(out.dims, cases[c].out, sizeof cases[c].out);
    int64_t *map = ref_bcast_map(&in, &out);
    CHECK(map != NULL, "bcast map case %zu: NULL", c);
    if (!map) continue;
    int64_t n = gpuc_numel(&out), bad = 0;
    for (int64_t i = 0; i < n; i++) bad += map[i] != naive_bcast(&in, &out, i);
    CHECK(bad == 0, "bcast map case %zu: %lld of %lld entries differ", c, (long long)bad,
          (long long)n);
    free(map);
  }
}

/* ---- GEMM ----------------------------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double rnd(void) { /* xorshift64*, in [-1, 1) */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 4503599627370496.0 - 1.0;
}

static void test_gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                           float beta) {
  /* padded leading dims so a stride mix-up shows */
  int64_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  int64_t lda = acols + 3, ldb = bcols + 2, ldc = N + 5;
  size_t asz = (size_t)(arows * lda + 1), bsz = (size_t)(brows * ldb + 1),
         csz = (size_t)(M * ldc + 1);
  float *A = malloc(asz * 4), *B = malloc(bsz * 4), *C = malloc(csz * 4), *C0 = malloc(csz * 4);
  double *Ad = malloc(asz * 8), *Bd = malloc(bsz * 8), *Cd = malloc(csz * 8);
  for (size_t i = 0; i < asz; i++) Ad[i] = A[i] = (float)rnd();
  for (size_t i = 0; i < bsz; i++) Bd[i] = B[i] = (float)rnd();
  for (size_t i = 0; i < csz; i++) Cd[i] = C0[i] = C[i] = (float)rnd();
  if (beta == 0) /* beta 0 must ignore C entirely, NaN included */
    for (int64_t m = 0; m < M; m++) C[m * ldc] = Cd[m * ldc] = NAN;
  int rc = ref_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  int rcd = ref_dgemm(ta, tb, M, N, K, alpha, Ad, lda, Bd, ldb, beta, Cd, ldc);
  int bad = 0, badd = 0, pad = 0;
  double worst = 0;
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
        mag += fabs(a * b);
      }
      double want = alpha * acc + (beta == 0 ? 0 : beta * (double)C0[m * ldc + n]);
      double tol = 1e-5 * (fabs(alpha) * mag + fabs(beta) * fabs(C0[m * ldc + n])) + 1e-6;
      double err = fabs(C[m * ldc + n] - want);
      if (!(err <= tol)) bad++;
      if (err > worst) worst = err;
      if (!(fabs(Cd[m * ldc + n] - want) <= 1e-12 * (mag + 1))) badd++;
    }
    for (int64_t n = N; n < ldc; n++) pad += C[m * ldc + n] != C0[m * ldc + n];
  }
  CHECK(rc == 0 && rcd == 0, "gemm returned an error");
  CHECK(bad == 0, "sgemm ta=%d tb=%d M=%lld N=%lld K=%lld: %d wrong (worst err %g)", ta, tb,
        (long long)M, (long long)N, (long long)K, bad, worst);
  CHECK(badd == 0, "dgemm ta=%d tb=%d M=%lld N=%lld K=%lld: %d wrong", ta, tb, (long long)M,
        (long long)N, (long long)K, badd);
  CHECK(pad == 0, "sgemm wrote %d elements past N in C's padding", pad);
  free(A); free(B); free(C); free(C0); free(Ad); free(Bd); free(Cd);
}

static void test_gemm(void) {
  static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {8, 64, 3}, {5, 4, 0},
                                      {0, 3, 2}};
  static const float ab[][2] = {{1, 0}, {0.5f, 2}, {-1.5f, 0}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t k = 0; k < sizeof ab / sizeof *ab; k++)
          test_gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], ab[k][0], ab[k][1]);
}

/* ---- npy ------------------------------------------------------------------ */

static char tmpdir[] = "/tmp/gpuc_test_ir_XXXXXX";

static void tmp_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(data, 1, n, f);
  fclose(f);
}

/* A v1.0 .npy file with the given header dict and n data bytes. */
static void write_npy_raw(const char *path, const char *dict, const void *data, size_t n) {
  unsigned char buf[1024];
  size_t hl = strlen(dict);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  memcpy(buf + 10, dict, hl);
  if (10 + hl + n <= sizeof buf) memcpy(buf + 10 + hl, data, n);
  write_bytes(path, buf, 10 + hl + n);
}

static void test_npy_roundtrip(void) {
  static const struct { GpucDType dt; int rank; int64_t dims[3]; } cases[] = {
    {GPUC_DT_F32, 2, {3, 4}}, {GPUC_DT_F16, 1, {7}}, {GPUC_DT_F64, 3, {2, 1, 3}},
    {GPUC_DT_I8, 1, {5}}, {GPUC_DT_U8, 2, {2, 2}}, {GPUC_DT_I16, 1, {3}},
    {GPUC_DT_U16, 1, {3}}, {GPUC_DT_I32, 2, {4, 1}}, {GPUC_DT_U32, 1, {2}},
    {GPUC_DT_I64, 0, {0}}, {GPUC_DT_U64, 1, {3}}, {GPUC_DT_BOOL, 2, {2, 3}},
    {GPUC_DT_F32, 2, {0, 5}}, {GPUC_DT_F32, 0, {0}},
  };
  char path[512];
  tmp_path(path, sizeof path, "rt.npy");
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    GpucErr e = {0};
    Tensor *t = gpuc_tensor_new(cases[c].dt, cases[c].rank, cases[c].dims, &e);
    if (!t) { CHECK(false, "npy case %zu: tensor_new: %s", c, e.msg); continue; }
    unsigned char *p = t->data;
    size_t bytes = gpuc_tensor_bytes(t);
    for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)(i * 37 + c);
    if (t->dt == GPUC_DT_BOOL)
      for (size_t i = 0; i < bytes; i++) p[i] &= 1;
    int rc = gpuc_npy_save(path, t, &e);
    CHECK(rc == 0, "npy case %zu (%s): save failed: %s", c, gpuc_dtype_name(t->dt), e.msg);
    Tensor *u = rc == 0 ? gpuc_npy_load(path, &e) : NULL;
    CHECK(u != NULL, "npy case %zu (%s): load failed: %s", c, gpuc_dtype_name(t->dt), e.msg);
    if (u) {
      bool same = u->dt == t->dt && u->rank == t->rank &&
                  !memcmp(u->dims, t->dims, sizeof(int64_t) * (size_t)t->rank) &&
                  gpuc_tensor_bytes(u) == bytes && !memcmp(u->data, t->data, bytes);
      CHECK(same, "npy case %zu (%s): loaded tensor differs", c, gpuc_dtype_name(t->dt));
    }
    gpuc_tensor_free(t);
    gpuc_tensor_free(u);
  }
  /* bf16 has no .npy dtype: refused, and no file is left behind */
  GpucErr e = {0};
  int64_t d[] = {2};
  Tensor *b = gpuc_tensor_new(GPUC_DT_BF16, 1, d, &e);
  tmp_path(path, sizeof path, "bf16.npy");
  CHECK(b && gpuc_npy_save(path, b, &e) == -1 && access(path, F_OK) != 0,
        "npy save of bf16 must fail");
  gpuc_tensor_free(b);
  unlink(path);
}

static void expect_npy_reject(const char *name, const char *why) {
  char path[512];
  tmp_path(path, sizeof path, name);
  GpucErr e = {0};
  Tensor *t = gpuc_npy_load(path, &e);
  CHECK(t == NULL && e.msg[0], "npy: %s must be rejected with a message", why);
  gpuc_tensor_free(t);
  unlink(path);
}

static void test_npy_bad(void) {
  char path[512];
  GpucErr e = {0};
  /* a valid file, then truncated by a few bytes of data */
  int64_t d[] = {4, 4};
  Tensor *t = gpuc_tensor_new(GPUC_DT_F32, 2, d, &e);
  tmp_path(path, sizeof path, "trunc.npy");
  if (t && gpuc_npy_save(path, t, &e) == 0) {
    FILE *f = fopen(path, "rb");
    unsigned char buf[512];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    write_bytes(path, buf, n - 3);
    expect_npy_reject("trunc.npy", "data truncated by 3 bytes");
    tmp_path(path, sizeof path, "hdr.npy");
    write_bytes(path, buf, 30);
    expect_npy_reject("hdr.npy", "a truncated header");
    tmp_path(path, sizeof path, "long.npy");
    buf[n] = 0;
    write_bytes(path, buf, n + 1);
    expect_npy_reject("long.npy", "trailing bytes after the data");
  } else {
    CHECK(false, "npy: could not write the base file: %s", e.msg);
  }
  gpuc_tensor_free(t);

  tmp_path(path, sizeof path, "garbage.npy");
  write_bytes(path, "this is not a numpy file at all, just some text\n", 48);
  expect_npy_reject("garbage.npy", "garbage");
  tmp_path(path, sizeof path, "short.npy");
  write_bytes(path, "\x93NUM", 4);
  expect_npy_reject("short.npy", "a 4-byte file");
  tmp_path(path, sizeof path, "empty.npy");
  write_bytes(path, "", 0);
  expect_npy_reject("empty.npy", "an empty file");
  expect_npy_reject("does_not_exist.npy", "a missing file");

  static const unsigned char four[4] = {0};
  static const struct { const char *dict; const char *why; } bad[] = {
    {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "Fortran order"},
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "an unsupported dtype"},
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "big-endian data"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "a negative dim"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, x), }", "a bad shape"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,", "an unterminated shape"},
    {"{'descr': '<f4', 'fortran_order': False, }", "no shape"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }",
     "a shape over the allocation cap"},
    {"{'descr': '<f4', 'fortran_order': False, "
     "'shape': (4294967296, 4294967296, 4294967296), }", "a shape whose size overflows"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
     "a rank past the maximum"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tmp_path(path, sizeof path, "bad.npy");
    write_npy_raw(path, bad[i].dict, four, sizeof four);
    expect_npy_reject("bad.npy", bad[i].why);
  }
  /* the same writer with a good dict loads: the rejections above are real */
  tmp_path(path, sizeof path, "good.npy");
  write_npy_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", four,
                sizeof four);
  Tensor *g = gpuc_npy_load(path, &e);
  CHECK(g && g->dt == GPUC_DT_F32 && g->rank == 1 && g->dims[0] == 1,
        "npy: a minimal hand-written file must load: %s", e.msg);
  gpuc_tensor_free(g);
  unlink(path);
}

int main(void) {
  test_f16_all_patterns();
  test_f16_rounding();
  test_bf16();
  test_numel();
  test_alloc();
  test_bcast();
  test_gemm();
  if (mkdtemp(tmpdir)) {
    test_npy_roundtrip();
    test_npy_bad();
    rmdir(tmpdir);
  } else {
    CHECK(false, "mkdtemp failed");
  }
  return check_summary();
}
