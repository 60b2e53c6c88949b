/* The fast Conv gradients (im2col + GEMM, ref_conv.c) against the plain
 * loops (ref_train_nn.c) on random geometries: 1-D..3-D, groups (depthwise
 * included), strides, asymmetric pads, dilations, pointwise windows.
 *
 * Tolerance: per element, |fast - loops| <= TOL * S where S is the sum of
 * the absolute values of the products that element sums (the loops run on
 * |W|, |dY|, |X|), TOL = 1e-5 in f32 and 1e-12 in f64; an element with no
 * product (S == 0, e.g. input positions no window reads) must be exactly 0.
 * Self-checking: prints each failure, then "N passed, N failed". */
#include "ref_conv.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* A random window whose every output dim is >= 1; `pointwise` forces 1x1,
 * stride 1, no pads (the path without col). */
static void random_window(NnWindow *w, bool pointwise) {
  memset(w, 0, sizeof *w);
  w->nsp = rnd_in(1, 3);
  w->n = rnd_in(1, 3);
  w->group = rnd_in(1, 3);
  w->c_in = w->group * rnd_in(1, 3);
  w->c_out = w->group * rnd_in(1, 3);
  for (int d = 0; d < w->nsp; d++) {
    bool pw = pointwise;
    w->k[d] = pw ? 1 : rnd_in(1, 3);
    w->stride[d] = pw ? 1 : rnd_in(1, 3);
    w->dil[d] = pw ? 1 : rnd_in(1, 2);
    w->pad_b[d] = pw ? 0 : rnd_in(0, 2);
    w->pad_e[d] = pw ? 0 : rnd_in(0, 2);
    int64_t span = w->dil[d] * (w->k[d] - 1) + 1;
    int64_t lo = span - w->pad_b[d] - w->pad_e[d];
    w->in[d] = (lo > 1 ? lo : 1) + rnd_in(0, w->nsp == 3 ? 3 : 6);
    w->out[d] = (w->in[d] + w->pad_b[d] + w->pad_e[d] - span) / w->stride[d] + 1;
  }
}

static Tensor wrap(GpucDType dt, int64_t n, void *data) {
  Tensor t = {.dt = dt, .rank = 1, .dims = {n}, .data = data};
  return t;
}

/* Compare fast (f) with the loops (ref) under the bound TOL * S. */
static void compare(const char *what, int trial, const NnWindow *w, int64_t n, const double *f,
                    const double *ref, const double *S, double tol) {
  int64_t bad = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double err = fabs(f[i] - ref[i]);
    bool ok = S[i] == 0 ? f[i] == 0 : err <= tol * S[i];
    if (!ok && bad < 0) bad = i;
    if (S[i] > 0 && err / S[i] > worst) worst = err / S[i];
  }
  if (bad < 0) { passed++; return; }
  failed++;
  fprintf(stderr,
          "FAIL %s trial %d (nsp %d n %lld c_in %lld c_out %lld group %lld k0 %lld s0 %lld "
          "d0 %lld pads0 %lld,%lld): [%lld] fast %.9g loops %.9g S %.3g (worst err/S %.3g)\n",
          what, trial, w->nsp, (long long)w->n, (long long)w->c_in, (long long)w->c_out,
          (long long)w->group, (long long)w->k[0], (long long)w->stride[0], (long long)w->dil[0],
          (long long)w->pad_b[0], (long long)w->pad_e[0], (long long)bad, f[bad], ref[bad],
          S[bad], worst);
}

/* One geometry, in f32 and f64: dX and dW both ways. */
static void run_case(int trial, const NnWindow *w) {
  int64_t nx = w->n * w->c_in * prod(w->in, w->nsp), ny = w->n * w->c_out * prod(w->out, w->nsp);
  int64_t nw = w->c_out * (w->c_in / w->group) * prod(w->k, w->nsp);
  int64_t nmax = nx > ny ? nx : ny;
  nmax = nmax > nw ? nmax : nw;
  /* d*: values, a*: absolute values, f/r/s: fast, loops, bound sums (f64) */
  double *dx = malloc(8 * (size_t)nx), *dw = malloc(8 * (size_t)nw), *dy = malloc(8 * (size_t)ny);
  double *ax = malloc(8 * (size_t)nx), *aw = malloc(8 * (size_t)nw), *ay = malloc(8 * (size_t)ny);
  double *f = malloc(8 * (size_t)nmax), *r = malloc(8 * (size_t)nmax), *s = malloc(8 * (size_t)nmax);
  float *fx = malloc(4 * (size_t)nx), *fw = malloc(4 * (size_t)nw), *fy = malloc(4 * (size_t)ny);
  float *fo = malloc(4 * (size_t)nmax), *fr = malloc(4 * (size_t)nmax);
  GPUC_ASSERT(dx && dw && dy && ax && aw && ay && f && r && s && fx && fw && fy && fo && fr);
  /* values in [-1, 1] \ {0}, rounded to f32 so both dtypes see the same data */
  struct { double *d, *a; float *f; int64_t n; } v[3] = {{dx, ax, fx, nx}, {dw, aw, fw, nw},
                                                         {dy, ay, fy, ny}};
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < v[k].n; i++) {
      v[k].f[i] = (float)((int)(rnd() % 2000) - 999.5) / 1000.0f;
      v[k].d[i] = v[k].f[i];
      v[k].a[i] = fabs(v[k].d[i]);
    }
  Tensor tw = wrap(GPUC_DT_F64, nw, dw), ty = wrap(GPUC_DT_F64, ny, dy), tx = wrap(GPUC_DT_F64, nx, dx);
  Tensor taw = wrap(GPUC_DT_F64, nw, aw), tay = wrap(GPUC_DT_F64, ny, ay), tax = wrap(GPUC_DT_F64, nx, ax);
  Tensor tr = wrap(GPUC_DT_F64, nmax, r), ts = wrap(GPUC_DT_F64, nmax, s);
  Tensor tfw = wrap(GPUC_DT_F32, nw, fw), tfy = wrap(GPUC_DT_F32, ny, fy), tfx = wrap(GPUC_DT_F32, nx, fx);
  Tensor tfr = wrap(GPUC_DT_F32, nmax, fr);

  /* dX: f64 fast vs f64 loops; f32 fast vs f32 loops (loops sum in f64) */
  tr.dims[0] = ts.dims[0] = tfr.dims[0] = nx;
  GPUC_ASSERT(!ref_conv_grad_input_loops(w, &tw, &ty, &tr) &&
              !ref_conv_grad_input_loops(w, &taw, &tay, &ts));
  GPUC_ASSERT(!ref_conv_grad_input_f64(w, dw, dy, f));
  compare("dX f64", trial, w, nx, f, r, s, 1e-12);
  GPUC_ASSERT(!ref_conv_grad_input_f32(w, fw, fy, fo) &&
              !ref_conv_grad_input_loops(w, &tfw, &tfy, &tfr));
  for (int64_t i = 0; i < nx; i++) { f[i] = fo[i]; r[i] = fr[i]; }
  compare("dX f32", trial, w, nx, f, r, s, 1e-5);

  /* dW */
  tr.dims[0] = ts.dims[0] = tfr.dims[0] = nw;
  GPUC_ASSERT(!ref_conv_grad_weight_loops(w, &tx, &ty, &tr) &&
              !ref_conv_grad_weight_loops(w, &tax, &tay, &ts));
  GPUC_ASSERT(!ref_conv_grad_weight_f64(w, dx, dy, f));
  compare("dW f64", trial, w, nw, f, r, s, 1e-12);
  GPUC_ASSERT(!ref_conv_grad_weight_f32(w, fx, fy, fo) &&
              !ref_conv_grad_weight_loops(w, &tfx, &tfy, &tfr));
  for (int64_t i = 0; i < nw; i++) { f[i] = fo[i]; r[i] = fr[i]; }
  compare("dW f32", trial, w, nw, f, r, s, 1e-5);

  free(dx); free(dw); free(dy); free(ax); free(aw); free(ay); free(f); free(r); free(s);
  free(fx); free(fw); free(fy); free(fo); free(fr);
}

int main(void) {
  int trials = 0;
  for (int t = 0; t < 300; t++, trials++) {
    NnWindow w;
    random_window(&w, t % 10 == 9);
    run_case(t, &w);
  }
  /* one bigger 2-D case, so the GEMM runs whole 6x16 tiles and long sums */
  NnWindow big = {.nsp = 2, .n = 4, .c_in = 16, .c_out = 32, .group = 1,
                  .in = {14, 14}, .out = {14, 14}, .k = {3, 3}, .stride = {1, 1},
                  .dil = {1, 1}, .pad_b = {1, 1}, .pad_e = {1, 1}};
  run_case(trials, &big);
  printf("conv_grad_fast: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
