/* Unit tests of the NN-family ops (infer_nn.c, ref_conv/pool/norm/resize.c):
 *  - Conv / ConvTranspose against a naive direct loop on random 1-D..3-D
 *    configurations (groups, strides, dilations, pads, auto_pad), in f32,
 *    f64 and f16;
 *  - hostile attributes and shapes: each must fail with a message;
 *  - import-time inference with unknown dims and unknown Resize inputs;
 *  - a few Resize/Upsample cases the conformance data lacks (opset 18 axes,
 *    keep_aspect_ratio_policy, antialias, Upsample-7).
 * Self-checking: prints each failure, then "N passed, N failed". */
#include "ir.h"
#include "ref.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"


static uint64_t rng = 12345;
static uint32_t rnd(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }
static float rnd_f(void) { return (float)(rnd() % 2001) / 1000.0f - 1.0f; }

/* ---- a one-node graph ---------------------------------------------------- */

#define MAX_ATTR 16
typedef struct {
  Graph *g;
  Attr attrs[MAX_ATTR];
  int nattr;
} One;

static void one_new(One *o, GpucOp op, int nin, int nout, int64_t opset) {
  memset(o, 0, sizeof *o);
  o->g = gpuc_graph_new("test");
  o->g->opset = opset;
  int ni = gpuc_graph_add_node(o->g, op, "n", nin, nout);
  GPUC_ASSERT(ni == 0);
  char name[32];
  for (int i = 0; i < nin; i++) {
    snprintf(name, sizeof name, "in%d", i);
    o->g->nodes[0].in[i] = gpuc_graph_add_value(o->g, name);
  }
  for (int i = 0; i < nout; i++) {
    snprintf(name, sizeof name, "out%d", i);
    o->g->nodes[0].out[i] = gpuc_graph_add_value(o->g, name);
  }
  o->g->nodes[0].attrs = o->attrs;
}
static void one_free(One *o) {
  o->g->nodes[0].attrs = NULL;
  o->g->nodes[0].nattr = 0;
  gpuc_graph_free(o->g);
}
static Attr *add_attr(One *o, const char *name, GpucAttrKind kind) {
  GPUC_ASSERT(o->nattr < MAX_ATTR);
  Attr *a = &o->attrs[o->nattr++];
  memset(a, 0, sizeof *a);
  a->name = name;
  a->kind = kind;
  o->g->nodes[0].nattr = o->nattr;
  return a;
}
static void attr_i(One *o, const char *name, int64_t v) { add_attr(o, name, GPUC_ATTR_INT)->i = v; }
static void attr_f(One *o, const char *name, float v) { add_attr(o, name, GPUC_ATTR_FLOAT)->f = v; }
static void attr_s(One *o, const char *name, const char *v) { add_attr(o, name, GPUC_ATTR_STRING)->s = v; }
static void attr_ints(One *o, const char *name, int n, const int64_t *v) {
  Attr *a = add_attr(o, name, GPUC_ATTR_INTS);
  a->n = n;
  a->ints = gpuc_arena_alloc(&o->g->arena, sizeof(int64_t) * (size_t)(n + 1));
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}
static void attr_floats(One *o, const char *name, int n, const float *v) {
  Attr *a = add_attr(o, name, GPUC_ATTR_FLOATS);
  a->n = n;
  a->floats = gpuc_arena_alloc(&o->g->arena, sizeof(float) * (size_t)(n + 1));
  memcpy(a->floats, v, sizeof(float) * (size_t)n);
}

/* Run the node's reference kernel; outs[] get new tensors (caller frees). */
static int one_run(One *o, const Tensor **ins, Tensor **outs, GpucErr *e) {
  memset(e, 0, sizeof *e);
  return gpuc_ref_run_node(o->g, &o->g->nodes[0], ins, outs, e);
}

static Tensor *tensor(GpucDType dt, int rank, const int64_t *dims) {
  GpucErr e;
  Tensor *t = gpuc_tensor_new(dt, rank, dims, &e);
  GPUC_ASSERT(t);
  return t;
}
static Tensor *rand_tensor(GpucDType dt, int rank, const int64_t *dims) {
  Tensor *t = tensor(dt, rank, dims);
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, rnd_f());
  return t;
}

/* ---- Conv / ConvTranspose against naive loops ---------------------------- */

typedef struct {
  int nsp, group, cin, cout, N;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], opad[3];
  int auto_pad; /* 0 NOTSET, 1 VALID, 2 SAME_UPPER, 3 SAME_LOWER */
  bool bias, transpose;
} ConvCfg;

static const char *ap_names[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};

/* Effective pads and output size, independently of infer_nn.c. Returns
 * false when the configuration has no valid output. */
static bool cfg_geometry(ConvCfg *c, int64_t *out) {
  for (int i = 0; i < c->nsp; i++) {
    int64_t eff = (c->k[i] - 1) * c->d[i] + 1;
    if (c->transpose) {
      int64_t full = c->s[i] * (c->in[i] - 1) + c->opad[i] + eff;
      if (c->auto_pad >= 2) {
        out[i] = c->in[i] * c->s[i];
        int64_t total = full - out[i];
        if (total < 0) { c->pb[i] = 0; c->pe[i] = total; continue; }
        c->pb[i] = c->auto_pad == 2 ? total / 2 : total - total / 2;
        c->pe[i] = total - c->pb[i];
        continue;
      }
      if (c->auto_pad == 1) c->pb[i] = c->pe[i] = 0;
      out[i] = full - c->pb[i] - c->pe[i];
      if (out[i] < 1) return false;
      continue;
    }
    if (c->auto_pad >= 2) {
      out[i] = (c->in[i] + c->s[i] - 1) / c->s[i];
      int64_t total = (out[i] - 1) * c->s[i] + eff - c->in[i];
      if (total < 0) total = 0;
      c->pb[i] = c->auto_pad == 2 ? total / 2 : total - total / 2;
      c->pe[i] = total - c->pb[i];
      continue;
    }
    if (c->auto_pad == 1) c->pb[i] = c->pe[i] = 0;
    int64_t span = c->in[i] + c->pb[i] + c->pe[i];
    if (span < eff) return false;
    out[i] = (span - eff) / c->s[i] + 1;
  }
  return true;
}

/* Naive N-D conv / transposed conv in f64 from f64 copies of x, w, b. */
static void naive(const ConvCfg *c, const double *x, const double *w, const double *b,
                  const int64_t *out, double *y) {
  int nsp = c->nsp;
  int64_t HWin = 1, HWout = 1, K = 1;
  for (int i = 0; i < nsp; i++) { HWin *= c->in[i]; HWout *= out[i]; K *= c->k[i]; }
  int cing = c->cin / c->group, coutg = c->cout / c->group;
  for (int64_t i = 0; i < (int64_t)c->N * c->cout * HWout; i++) y[i] = 0;
  /* walk (grid position, tap) pairs; the grid is Y for conv, X for
   * transposed conv, and the tap lands on the other tensor */
  const int64_t *grid = c->transpose ? c->in : out, *tgt = c->transpose ? out : c->in;
  int64_t G = c->transpose ? HWin : HWout;
  for (int64_t p = 0; p < G; p++) {
    int64_t gp[3], rem = p;
    for (int i = nsp - 1; i >= 0; i--) { gp[i] = rem % grid[i]; rem /= grid[i]; }
    for (int64_t kp = 0; kp < K; kp++) {
      int64_t kk[3], r2 = kp, t = 0;
      bool ok = true;
      for (int i = nsp - 1; i >= 0; i--) { kk[i] = r2 % c->k[i]; r2 /= c->k[i]; }
      for (int i = 0; i < nsp; i++) {
        int64_t v = gp[i] * c->s[i] - c->pb[i] + kk[i] * c->d[i];
        if (v < 0 || v >= tgt[i]) ok = false;
        t = t * tgt[i] + v;
      }
      if (!ok) continue;
      for (int n = 0; n < c->N; n++)
        for (int g = 0; g < c->group; g++)
          for (int ci = 0; ci < cing; ci++)
            for (int mo = 0; mo < coutg; mo++) {
              int cc = g * cing + ci, m = g * coutg + mo;
              if (!c->transpose) {
                double wv = w[((int64_t)m * cing + ci) * K + kp];
                y[((int64_t)n * c->cout + m) * HWout + p] += wv * x[((int64_t)n * c->cin + cc) * HWin + t];
              } else {
                double wv = w[((int64_t)cc * coutg + mo) * K + kp];
                y[((int64_t)n * c->cout + m) * HWout + t] += wv * x[((int64_t)n * c->cin + cc) * HWin + p];
              }
            }
    }
  }
  if (b)
    for (int n = 0; n < c->N; n++)
      for (int m = 0; m < c->cout; m++)
        for (int64_t p = 0; p < HWout; p++) y[((int64_t)n * c->cout + m) * HWout + p] += b[m];
}

static void random_cfg(ConvCfg *c, bool transpose) {
  memset(c, 0, sizeof *c);
  c->transpose = transpose;
  c->nsp = rnd_in(1, 3);
  c->group = rnd_in(1, 3);
  c->cin = c->group * rnd_in(1, 3);
  c->cout = c->group * rnd_in(1, 3);
  c->N = rnd_in(1, 2);
  c->bias = rnd() % 2;
  c->auto_pad = rnd() % 4 == 0 ? rnd_in(1, 3) : 0;
  for (int i = 0; i < c->nsp; i++) {
    c->in[i] = rnd_in(1, c->nsp == 3 ? 5 : 9);
    c->k[i] = rnd_in(1, 3);
    c->s[i] = rnd_in(1, 3);
    c->d[i] = rnd_in(1, 2);
    c->pb[i] = rnd_in(0, 2);
    c->pe[i] = rnd_in(0, 2);
    int64_t mx = c->s[i] > c->d[i] ? c->s[i] : c->d[i];
    c->opad[i] = transpose && c->auto_pad != 1 ? rnd_in(0, (int)mx - 1) : 0;
  }
}

static void conv_case(const ConvCfg *cfg0, GpucDType dt) {
  ConvCfg c = *cfg0;
  int64_t out[3];
  bool valid = cfg_geometry(&c, out);
  One o;
  one_new(&o, c.transpose ? GPUC_OP_CONVTRANSPOSE : GPUC_OP_CONV, c.bias ? 3 : 2, 1, 17);
  int nsp = c.nsp;
  int64_t pads[6];
  for (int i = 0; i < nsp; i++) { pads[i] = cfg0->pb[i]; pads[nsp + i] = cfg0->pe[i]; }
  attr_ints(&o, "strides", nsp, c.s);
  attr_ints(&o, "dilations", nsp, c.d);
  attr_i(&o, "group", c.group);
  if (c.auto_pad) attr_s(&o, "auto_pad", ap_names[c.auto_pad]);
  else attr_ints(&o, "pads", 2 * nsp, pads);
  if (c.transpose) attr_ints(&o, "output_padding", nsp, c.opad);
  int64_t xd[5] = {c.N, c.cin}, wd[5], bd[1] = {c.cout};
  wd[0] = c.transpose ? c.cin : c.cout;
  wd[1] = c.transpose ? c.cout / c.group : c.cin / c.group;
  for (int i = 0; i < nsp; i++) { xd[2 + i] = c.in[i]; wd[2 + i] = c.k[i]; }
  Tensor *x = rand_tensor(dt, nsp + 2, xd), *w = rand_tensor(dt, nsp + 2, wd),
         *b = c.bias ? rand_tensor(dt, 1, bd) : NULL;
  const Tensor *ins[3] = {x, w, b};
  Tensor *outs[1] = {NULL};
  GpucErr e;
  int rc = one_run(&o, ins, outs, &e);
  char desc[256];
  snprintf(desc, sizeof desc, "%s %dD %s g%d cin%d cout%d in%lldx%lldx%lld k%lld s%lld d%lld %s",
           c.transpose ? "ConvTranspose" : "Conv", nsp, gpuc_dtype_name(dt), c.group, c.cin,
           c.cout, (long long)c.in[0], (long long)c.in[1], (long long)c.in[2], (long long)c.k[0],
           (long long)c.s[0], (long long)c.d[0], ap_names[c.auto_pad]);
  if (!valid) {
    CHECK(rc != 0 && e.msg[0], "%s: invalid geometry must fail with a message", desc);
  } else if (rc) {
    CHECK(false, "%s: failed: %s", desc, e.msg);
  } else {
    Tensor *y = outs[0];
    bool shape_ok = y->rank == nsp + 2 && y->dims[0] == c.N && y->dims[1] == c.cout;
    for (int i = 0; i < nsp; i++) shape_ok &= y->dims[2 + i] == out[i];
    CHECK(shape_ok, "%s: output shape", desc);
    if (shape_ok) {
      int64_t nx = gpuc_numel(x), nw = gpuc_numel(w), ny = gpuc_numel(y);
      double *xf = malloc(sizeof(double) * (size_t)nx), *wf = malloc(sizeof(double) * (size_t)nw),
             *bf = malloc(sizeof(double) * (size_t)c.cout), *yf = malloc(sizeof(double) * (size_t)ny);
      for (int64_t i = 0; i < nx; i++) xf[i] = gpuc_get_f64(x, i);
      for (int64_t i = 0; i < nw; i++) wf[i] = gpuc_get_f64(w, i);
      for (int i = 0; b && i < c.cout; i++) bf[i] = gpuc_get_f64(b, i);
      naive(&c, xf, wf, b ? bf : NULL, out, yf);
      double tol = dt == GPUC_DT_F64 ? 1e-12 : dt == GPUC_DT_F32 ? 1e-5 : 2e-2;
      int64_t bad = 0;
      for (int64_t i = 0; i < ny; i++) {
        double got = gpuc_get_f64(y, i);
        if (fabs(got - yf[i]) > tol * (1 + fabs(yf[i]))) bad++;
      }
      CHECK(bad == 0, "%s: %lld of %lld values differ from the naive loop", desc, (long long)bad,
            (long long)ny);
      free(xf); free(wf); free(bf); free(yf);
    }
  }
  gpuc_tensor_free(outs[0]);
  gpuc_tensor_free(x); gpuc_tensor_free(w); gpuc_tensor_free(b);
  one_free(&o);
}

static void test_conv_random(void) {
  static const GpucDType dts[] = {GPUC_DT_F32, GPUC_DT_F64, GPUC_DT_F16};
  for (int t = 0; t < 300; t++) {
    ConvCfg c;
    random_cfg(&c, t % 2 == 1);
    conv_case(&c, dts[(t / 2) % 3]);
  }
}

/* ---- hostile attributes and shapes ------------------------------------- */

/* Build a Conv over X [1, 4, 8, 8], W [4, 4/group, 3, 3] and let `setup`
 * spoil it; it must fail with a message (never crash). */
static void expect_fail(One *o, const Tensor **ins, const char *what, const char *needle) {
  Tensor *outs[4] = {NULL};
  GpucErr e;
  int rc = one_run(o, ins, outs, &e);
  CHECK(rc != 0, "%s: must fail", what);
  CHECK(rc == 0 || (e.msg[0] && (!needle || strstr(e.msg, needle))),
        "%s: message '%s' lacks '%s'", what, e.msg, needle ? needle : "");
  for (int k = 0; k < 4; k++) gpuc_tensor_free(outs[k]);
}

static void test_conv_hostile(void) {
  int64_t xd[4] = {1, 4, 8, 8}, wd[4] = {4, 4, 3, 3}, w3d[3] = {4, 4, 3}, bd1[1] = {5};
  Tensor *x = rand_tensor(GPUC_DT_F32, 4, xd), *w = rand_tensor(GPUC_DT_F32, 4, wd);
  Tensor *w3 = rand_tensor(GPUC_DT_F32, 3, w3d), *b5 = rand_tensor(GPUC_DT_F32, 1, bd1);
  Tensor *wf64 = rand_tensor(GPUC_DT_F64, 4, wd);
  const Tensor *ins[3] = {x, w, NULL};
  One o;
  static const int64_t neg[2] = {-1, 1}, zero[2] = {0, 1}, big[2] = {(int64_t)1 << 62, 1},
                       k5[2] = {5, 5}, pads3[3] = {1, 1, 1}, negp[4] = {-1, 0, 0, 0},
                       dil9[2] = {9, 9};
#define CASE(setup, ins_, what, needle)                  \
  do {                                                   \
    one_new(&o, GPUC_OP_CONV, 3, 1, 17);                 \
    setup;                                               \
    expect_fail(&o, ins_, what, needle);                 \
    one_free(&o);                                        \
  } while (0)
  CASE(attr_ints(&o, "strides", 2, neg), ins, "negative stride", "strides");
  CASE(attr_ints(&o, "strides", 2, zero), ins, "zero stride", "strides");
  CASE(attr_ints(&o, "dilations", 2, zero), ins, "zero dilation", "dilations");
  CASE(attr_ints(&o, "strides", 2, big), ins, "huge stride", "strides");
  CASE(attr_ints(&o, "dilations", 2, dil9), ins, "dilated kernel larger than input", "larger");
  CASE(attr_ints(&o, "kernel_shape", 2, k5), ins, "kernel_shape disagrees with W", "kernel_shape");
  CASE(attr_ints(&o, "pads", 3, pads3), ins, "pads count", "pads");
  CASE(attr_ints(&o, "pads", 4, negp), ins, "negative pads", "pads");
  CASE(attr_i(&o, "group", 0), ins, "group 0", "group");
  CASE(attr_i(&o, "group", 3), ins, "channels vs group", "channels");
  CASE(attr_s(&o, "auto_pad", "SAME_MIDDLE"), ins, "bad auto_pad", "auto_pad");
  CASE(attr_i(&o, "strides", 2), ins, "strides as an int", "strides");
  const Tensor *ins_w3[3] = {x, w3, NULL}, *ins_b[3] = {x, w, b5}, *ins_f64[3] = {x, wf64, NULL};
  CASE((void)0, ins_w3, "W rank vs X rank", "rank");
  CASE((void)0, ins_b, "bias length", "B");
  CASE((void)0, ins_f64, "W dtype", "dtype");
#undef CASE

  /* ConvTranspose: output_padding >= stride, huge output */
  int64_t xs[4] = {1, 4, 3, 3};
  Tensor *xsm = rand_tensor(GPUC_DT_F32, 4, xs);
  const Tensor *tins[3] = {xsm, w, NULL};
  static const int64_t op2[2] = {2, 2}, st2[2] = {2, 2}, os_huge[2] = {(int64_t)1 << 20, (int64_t)1 << 20},
                       st_big[2] = {(int64_t)1 << 39, (int64_t)1 << 39};
  one_new(&o, GPUC_OP_CONVTRANSPOSE, 3, 1, 17);
  attr_ints(&o, "strides", 2, st2);
  attr_ints(&o, "output_padding", 2, op2);
  expect_fail(&o, tins, "ConvTranspose output_padding >= stride", "output_padding");
  one_free(&o);
  one_new(&o, GPUC_OP_CONVTRANSPOSE, 3, 1, 17);
  attr_ints(&o, "output_shape", 2, os_huge);
  expect_fail(&o, tins, "ConvTranspose huge output_shape", NULL);
  one_free(&o);
  one_new(&o, GPUC_OP_CONVTRANSPOSE, 3, 1, 17);
  attr_ints(&o, "strides", 2, st_big);
  expect_fail(&o, tins, "ConvTranspose huge strides", NULL);
  one_free(&o);

  /* pools */
  const Tensor *pins[1] = {x};
  static const int64_t k3[2] = {3, 3}, p3[4] = {3, 3, 3, 3}, k0[2] = {0, 3}, k20[2] = {20, 20};
  one_new(&o, GPUC_OP_MAXPOOL, 1, 2, 17);
  expect_fail(&o, pins, "MaxPool without kernel_shape", "kernel_shape");
  one_free(&o);
  one_new(&o, GPUC_OP_MAXPOOL, 1, 2, 17);
  attr_ints(&o, "kernel_shape", 2, k3);
  attr_ints(&o, "pads", 4, p3);
  expect_fail(&o, pins, "MaxPool pads >= kernel", "pads");
  one_free(&o);
  one_new(&o, GPUC_OP_AVERAGEPOOL, 1, 1, 17);
  attr_ints(&o, "kernel_shape", 2, k0);
  expect_fail(&o, pins, "AveragePool zero kernel", "kernel_shape");
  one_free(&o);
  one_new(&o, GPUC_OP_AVERAGEPOOL, 1, 1, 17);
  attr_ints(&o, "kernel_shape", 2, k20);
  expect_fail(&o, pins, "AveragePool kernel larger than input", "larger");
  one_free(&o);
  one_new(&o, GPUC_OP_MAXPOOL, 1, 2, 17);
  attr_ints(&o, "kernel_shape", 2, k3);
  attr_i(&o, "storage_order", 7);
  expect_fail(&o, pins, "MaxPool storage_order", "storage_order");
  one_free(&o);

  /* absurd work: a huge kernel over huge padding must fail, not run for days */
  {
    int64_t x1d[4] = {1, 1, 1, 1}, wbd[4] = {1, 1, 2048, 2048}, xpd[4] = {1, 1, 1024, 1024};
    static const int64_t pbig[4] = {2047, 2047, 2047, 2047}, kp[2] = {1024, 1024},
                         pp[4] = {1023, 1023, 1023, 1023};
    Tensor *x1 = rand_tensor(GPUC_DT_F32, 4, x1d), *wb = tensor(GPUC_DT_F32, 4, wbd);
    Tensor *xp = tensor(GPUC_DT_F32, 4, xpd);
    const Tensor *cins[3] = {x1, wb, NULL}, *pins2[1] = {xp};
    one_new(&o, GPUC_OP_CONV, 2, 1, 17);
    attr_ints(&o, "pads", 4, pbig);
    expect_fail(&o, cins, "Conv with absurd work", "limit");
    one_free(&o);
    one_new(&o, GPUC_OP_MAXPOOL, 1, 1, 17);
    attr_ints(&o, "kernel_shape", 2, kp);
    attr_ints(&o, "pads", 4, pp);
    expect_fail(&o, pins2, "MaxPool with absurd work", "limit");
    one_free(&o);
    gpuc_tensor_free(x1); gpuc_tensor_free(wb); gpuc_tensor_free(xp);
  }

  /* DepthToSpace / SpaceToDepth */
  one_new(&o, GPUC_OP_DEPTHTOSPACE, 1, 1, 13);
  attr_i(&o, "blocksize", 3);
  expect_fail(&o, pins, "DepthToSpace channels vs blocksize", "blocksize");
  one_free(&o);
  one_new(&o, GPUC_OP_DEPTHTOSPACE, 1, 1, 13);
  attr_i(&o, "blocksize", 0);
  expect_fail(&o, pins, "DepthToSpace blocksize 0", "blocksize");
  one_free(&o);
  one_new(&o, GPUC_OP_SPACETODEPTH, 1, 1, 13);
  attr_i(&o, "blocksize", 3);
  expect_fail(&o, pins, "SpaceToDepth H vs blocksize", "blocksize");
  one_free(&o);

  /* normalizations */
  int64_t c3[1] = {3};
  Tensor *p3t = rand_tensor(GPUC_DT_F32, 1, c3);
  const Tensor *bn[5] = {x, p3t, p3t, p3t, p3t};
  one_new(&o, GPUC_OP_BATCHNORMALIZATION, 5, 1, 15);
  expect_fail(&o, bn, "BatchNormalization parameter length", "scale");
  one_free(&o);
  const Tensor *ln[2] = {x, p3t};
  one_new(&o, GPUC_OP_LAYERNORMALIZATION, 2, 1, 17);
  attr_i(&o, "axis", 4);
  expect_fail(&o, ln, "LayerNormalization axis", "axis");
  one_free(&o);
  one_new(&o, GPUC_OP_LAYERNORMALIZATION, 2, 1, 17);
  expect_fail(&o, ln, "LayerNormalization scale shape", "Scale");
  one_free(&o);
  one_new(&o, GPUC_OP_LRN, 1, 1, 13);
  attr_i(&o, "size", 0);
  expect_fail(&o, pins, "LRN size 0", "size");
  one_free(&o);
  static const int64_t ax9[1] = {9};
  one_new(&o, GPUC_OP_MEANVARIANCENORMALIZATION, 1, 1, 13);
  attr_ints(&o, "axes", 1, ax9);
  expect_fail(&o, pins, "MVN axes", "axis");
  one_free(&o);

  gpuc_tensor_free(x); gpuc_tensor_free(w); gpuc_tensor_free(w3); gpuc_tensor_free(b5);
  gpuc_tensor_free(wf64); gpuc_tensor_free(xsm); gpuc_tensor_free(p3t);
}

/* ---- Resize / Upsample ------------------------------------------------- */

static Tensor *vec_f32(int n, const float *v) {
  int64_t d[1] = {n};
  Tensor *t = tensor(GPUC_DT_F32, 1, d);
  memcpy(t->data, v, sizeof(float) * (size_t)n);
  return t;
}
static Tensor *vec_i64(int n, const int64_t *v) {
  int64_t d[1] = {n};
  Tensor *t = tensor(GPUC_DT_I64, 1, d);
  memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
  return t;
}

static void test_resize_hostile(void) {
  int64_t xd[4] = {1, 2, 4, 4};
  Tensor *x = rand_tensor(GPUC_DT_F32, 4, xd);
  static const float s_neg[4] = {1, 1, -2, 2}, s_zero[4] = {1, 1, 0, 2}, s_huge[4] = {1, 1, 1e30f, 1e30f},
                     s_nan[4] = {1, 1, NAN, 2}, s_big[4] = {1, 1, 1e5f, 1e5f}, s_ok[4] = {1, 1, 2, 2};
  static const int64_t z_neg[4] = {1, 2, -4, 4}, z_ok[4] = {1, 2, 8, 8};
  const float *bad_scales[] = {s_neg, s_zero, s_huge, s_nan, s_big};
  const char *names[] = {"negative scale", "zero scale", "huge scale", "NaN scale",
                         "output over the tensor cap"};
  for (int i = 0; i < 5; i++) {
    One o;
    one_new(&o, GPUC_OP_RESIZE, 3, 1, 13);
    Tensor *s = vec_f32(4, bad_scales[i]);
    const Tensor *ins[3] = {x, NULL, s};
    expect_fail(&o, ins, names[i], NULL);
    gpuc_tensor_free(s);
    one_free(&o);
  }
  One o;
  Tensor *s = vec_f32(4, s_ok), *zn = vec_i64(4, z_neg), *zo = vec_i64(4, z_ok), *s3 = vec_f32(3, s_ok);
  one_new(&o, GPUC_OP_RESIZE, 4, 1, 13);
  const Tensor *both[4] = {x, NULL, s, zo};
  expect_fail(&o, both, "scales and sizes both given", "only one");
  const Tensor *neither[4] = {x, NULL, NULL, NULL};
  expect_fail(&o, neither, "neither scales nor sizes", "one of");
  const Tensor *negz[4] = {x, NULL, NULL, zn};
  expect_fail(&o, negz, "negative sizes", "sizes");
  const Tensor *short_s[4] = {x, NULL, s3, NULL};
  expect_fail(&o, short_s, "scales of the wrong length", "scales");
  one_free(&o);
  one_new(&o, GPUC_OP_RESIZE, 4, 1, 13);
  attr_s(&o, "mode", "quintic");
  const Tensor *ok[4] = {x, NULL, s, NULL};
  expect_fail(&o, ok, "unknown mode", "mode");
  one_free(&o);
  one_new(&o, GPUC_OP_RESIZE, 4, 1, 13);
  attr_s(&o, "coordinate_transformation_mode", "tf_crop_and_resize");
  Tensor *roi3 = vec_f32(3, s_ok);
  const Tensor *badroi[4] = {x, roi3, s, NULL};
  expect_fail(&o, badroi, "roi of the wrong length", "roi");
  one_free(&o);
  one_new(&o, GPUC_OP_UPSAMPLE, 1, 1, 7);
  const Tensor *up[1] = {x};
  expect_fail(&o, up, "Upsample-7 without scales", "scales");
  one_free(&o);
  gpuc_tensor_free(s); gpuc_tensor_free(zn); gpuc_tensor_free(zo); gpuc_tensor_free(s3);
  gpuc_tensor_free(roi3); gpuc_tensor_free(x);
}

static void test_resize_cases(void) {
  /* opset 18 axes + keep_aspect_ratio_policy=not_larger: [1,1,4,6] with
   * sizes (H, W) = (8, 8) keeps the ratio: scale min(2, 1.33) -> 5x8 */
  int64_t xd[4] = {1, 1, 4, 6};
  Tensor *x = rand_tensor(GPUC_DT_F32, 4, xd);
  static const int64_t axes[2] = {2, 3}, sz[2] = {8, 8};
  Tensor *sizes = vec_i64(2, sz);
  One o;
  one_new(&o, GPUC_OP_RESIZE, 4, 1, 18);
  attr_ints(&o, "axes", 2, axes);
  attr_s(&o, "keep_aspect_ratio_policy", "not_larger");
  attr_s(&o, "mode", "linear");
  const Tensor *ins[4] = {x, NULL, NULL, sizes};
  Tensor *outs[1] = {NULL};
  GpucErr e;
  int rc = one_run(&o, ins, outs, &e);
  CHECK(rc == 0, "Resize axes/not_larger: %s", e.msg);
  if (!rc)
    CHECK(outs[0]->dims[2] == 5 && outs[0]->dims[3] == 8, "Resize not_larger shape %lldx%lld",
          (long long)outs[0]->dims[2], (long long)outs[0]->dims[3]);
  gpuc_tensor_free(outs[0]);
  one_free(&o);

  /* antialias linear downsampling of a constant image stays constant, and
   * of a ramp stays within its range */
  int64_t cd[4] = {1, 1, 9, 9};
  Tensor *cst = tensor(GPUC_DT_F32, 4, cd);
  for (int i = 0; i < 81; i++) ((float *)cst->data)[i] = (i % 9 == 0) ? 3.0f : 3.0f;
  static const float sc[4] = {1, 1, 0.34f, 0.34f};
  Tensor *scales = vec_f32(4, sc);
  one_new(&o, GPUC_OP_RESIZE, 3, 1, 18);
  attr_s(&o, "mode", "cubic");
  attr_i(&o, "antialias", 1);
  attr_f(&o, "cubic_coeff_a", -0.5f);
  const Tensor *ains[3] = {cst, NULL, scales};
  rc = one_run(&o, ains, outs, &e);
  CHECK(rc == 0, "Resize antialias: %s", e.msg);
  if (!rc) {
    bool okv = outs[0]->dims[2] == 3 && outs[0]->dims[3] == 3;
    for (int i = 0; okv && i < 9; i++) okv = fabsf(((float *)outs[0]->data)[i] - 3.0f) < 1e-5f;
    CHECK(okv, "Resize antialias of a constant image is not constant");
  }
  gpuc_tensor_free(outs[0]);
  one_free(&o);

  /* Upsample-7: attribute scales, nearest */
  int64_t ud[2] = {2, 2};
  Tensor *u = tensor(GPUC_DT_I32, 2, ud);
  for (int i = 0; i < 4; i++) ((int32_t *)u->data)[i] = i + 1;
  static const float us[2] = {2, 3};
  one_new(&o, GPUC_OP_UPSAMPLE, 1, 1, 7);
  attr_floats(&o, "scales", 2, us);
  const Tensor *uins[1] = {u};
  rc = one_run(&o, uins, outs, &e);
  CHECK(rc == 0, "Upsample-7: %s", e.msg);
  if (!rc) {
    static const int32_t want[24] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                     3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
    CHECK(outs[0]->dims[0] == 4 && outs[0]->dims[1] == 6 && !memcmp(outs[0]->data, want, sizeof want),
          "Upsample-7 nearest values");
  }
  gpuc_tensor_free(outs[0]);
  one_free(&o);
  gpuc_tensor_free(x); gpuc_tensor_free(sizes); gpuc_tensor_free(cst); gpuc_tensor_free(scales);
  gpuc_tensor_free(u);
}

/* ---- import-time inference with unknown dims / data ------------------- */

static void set_value(One *o, int v, GpucDType dt, int rank, const int64_t *dims) {
  gpuc_set_shape(&o->g->values[v].t, dt, rank, dims);
}

static void test_import_unknown(void) {
  GpucErr e = {0};
  One o;
  /* Conv on [?, 3, ?, 224] with W [8, 3, 3, 3]: out [?, 8, ?, 222] */
  one_new(&o, GPUC_OP_CONV, 2, 1, 17);
  int64_t xd[4] = {-1, 3, -1, 224}, wd[4] = {8, 3, 3, 3};
  set_value(&o, o.g->nodes[0].in[0], GPUC_DT_F32, 4, xd);
  set_value(&o, o.g->nodes[0].in[1], GPUC_DT_F32, 4, wd);
  int rc = gpuc_graph_infer(o.g, &e);
  const Tensor *y = &o.g->values[o.g->nodes[0].out[0]].t;
  CHECK(rc == 0 && y->rank == 4 && y->dims[0] == -1 && y->dims[1] == 8 && y->dims[2] == -1 &&
            y->dims[3] == 222, "Conv import inference with unknown dims: %s", e.msg);
  one_free(&o);
  /* Resize with unknown scales: rank known, dims unknown */
  one_new(&o, GPUC_OP_RESIZE, 3, 1, 13);
  o.g->nodes[0].in[1] = -1; /* no roi */
  int64_t rd[4] = {1, 3, 8, 8}, sd[1] = {4};
  set_value(&o, o.g->nodes[0].in[0], GPUC_DT_F32, 4, rd);
  set_value(&o, o.g->nodes[0].in[2], GPUC_DT_F32, 1, sd);
  rc = gpuc_graph_infer(o.g, &e);
  y = &o.g->values[o.g->nodes[0].out[0]].t;
  CHECK(rc == 0 && y->rank == 4 && y->dims[2] == -1, "Resize import inference with unknown scales: %s",
        e.msg);
  one_free(&o);
  /* ConvTranspose with unknown spatial dims and SAME_UPPER */
  one_new(&o, GPUC_OP_CONVTRANSPOSE, 2, 1, 17);
  attr_s(&o, "auto_pad", "SAME_UPPER");
  int64_t td[4] = {1, 4, -1, 5}, twd[4] = {4, 2, 3, 3};
  set_value(&o, o.g->nodes[0].in[0], GPUC_DT_F32, 4, td);
  set_value(&o, o.g->nodes[0].in[1], GPUC_DT_F32, 4, twd);
  rc = gpuc_graph_infer(o.g, &e);
  y = &o.g->values[o.g->nodes[0].out[0]].t;
  CHECK(rc == 0 && y->dims[1] == 2 && y->dims[2] == -1 && y->dims[3] == 5,
        "ConvTranspose import inference: %s", e.msg);
  one_free(&o);
}

int main(void) {
  test_conv_random();
  test_conv_hostile();
  test_resize_hostile();
  test_resize_cases();
  test_import_unknown();
  return check_summary();
}
