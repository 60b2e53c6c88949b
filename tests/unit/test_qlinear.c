/* Quantized models from onnxruntime.quantization (tests/data/ort_qlinear,
 * made by tests/tools/make_ort_qlinear.py: a small CNN and an MLP through
 * quantize_dynamic (ConvInteger, MatMulInteger), quantize_static QOperator
 * (QLinearConv, QLinearMatMul; u8 and s8 activations) and QDQ), each with onnxruntime's CPU
 * output for one input:
 *  - the reference on the graph as imported (-O0) equals onnxruntime's
 *    output exactly (the same integer sums, the same f32 requantize);
 *  - at -O2 no QLinearConv, QLinearMatMul or ConvInteger is left
 *    (passes/expand_qlinear.c), the QLinearMatMuls and MatMulIntegers run
 *    as int8 GEMMs (MatMulInt8), and the outputs equal -O0's exactly on
 *    onnxruntime's input and on fresh random inputs (dynamic, QOperator:
 *    integer math end to end); QDQ: each MatMul reading DequantizeLinear
 *    of u8 (zero point != 0) is an int8 GEMM with the zero-point
 *    correction (pass_qdq_int8; the weight requantized from its folded
 *    float), within 1e-2 relative L2 of -O0 (the convs stay float
 *    DequantizeLinear -> Conv -> QuantizeLinear);
 *  - -O2 --fp16 within 2e-2 of onnxruntime (half storage of the float
 *    activations between the quantized ops; the integer sums stay f32). */
#include "check.h"
#include "frontend.h"
#include "passes.h"
#include "npy.h"
#include "ref.h"
#include "ref_random.h"
#include <math.h>
#include <string.h>

static int count(const Graph *g, GpucOp op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
  return n;
}

static double max_abs(const Tensor *a, const Tensor *b) {
  double m = 0;
  for (int64_t i = 0; i < gpuc_numel(b); i++) m = fmax(m, fabs(gpuc_get_f64(a, i) - gpuc_get_f64(b, i)));
  return m;
}

static Tensor *run1(Graph *g, const Tensor *x, GpucErr *e) {
  const Tensor *ins[1] = {x};
  Tensor *outs[4] = {0};
  if (gpuc_ref_run(g, ins, outs, e)) return NULL;
  for (int k = 1; k < 4; k++) gpuc_tensor_free(outs[k]);
  return outs[0];
}

/* dir: a model folder; exact: -O2 must equal -O0 bit for bit; int8: the
 * int8 GEMMs -O2 must have. */
static void check_model(const char *root, const char *name, bool exact, int int8) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/model.onnx", root, name);
  GpucErr e = {0};
  Graph *g0 = gpuc_onnx_load(path, NULL, 0, &e), *g1 = g0 ? gpuc_onnx_load(path, NULL, 0, &e) : NULL;
  Graph *g2 = g1 ? gpuc_onnx_load(path, NULL, 0, &e) : NULL;
  CHECK(g2 != NULL, "load %s: %s", path, e.msg);
  snprintf(path, sizeof path, "%s/%s/in_x.npy", root, name);
  Tensor *x = g2 ? gpuc_npy_load(path, &e) : NULL;
  snprintf(path, sizeof path, "%s/%s/y.npy", root, name);
  Tensor *want = x ? gpuc_npy_load(path, &e) : NULL;
  CHECK(want != NULL, "%s: %s", path, e.msg);
  if (!want) goto done;
  PassOptions o;
  gpuc_pass_options_default(&o, 2);
  CHECK(gpuc_passes_run(g1, &o, &e) == 0, "%s -O2: %s", name, e.msg);
  o.fp16 = true;
  CHECK(gpuc_passes_run(g2, &o, &e) == 0, "%s -O2 --fp16: %s", name, e.msg);
  int left = count(g1, GPUC_OP_QLINEARCONV) + count(g1, GPUC_OP_QLINEARMATMUL) + count(g1, GPUC_OP_CONVINTEGER);
  CHECK(left == 0 && count(g1, GPUC_OP_MATMULINT8) == int8 && count(g2, GPUC_OP_MATMULINT8) == int8,
        "%s: %d quantized ops left, %d / %d int8 GEMMs (want 0, %d)", name, left, count(g1, GPUC_OP_MATMULINT8),
        count(g2, GPUC_OP_MATMULINT8), int8);
  Tensor *y0 = run1(g0, x, &e);
  CHECK(y0 != NULL, "%s -O0: %s", name, e.msg);
  Tensor *y1 = y0 ? run1(g1, x, &e) : NULL;
  CHECK(y1 != NULL, "%s -O2: %s", name, e.msg);
  Tensor *y2 = y1 ? run1(g2, x, &e) : NULL;
  CHECK(y2 != NULL, "%s -O2 --fp16: %s", name, e.msg);
  if (y2) {
    double d0 = max_abs(y0, want), r1 = rel_l2(y1, want), d1 = max_abs(y1, want), r2 = rel_l2(y2, want);
    CHECK(d0 == 0, "%s -O0 against onnxruntime: max |diff| %g (want 0)", name, d0);
    CHECK(exact ? d1 == 0 : r1 < 1e-2, "%s -O2 against onnxruntime: max |diff| %g, rel L2 %.3g", name, d1, r1);
    CHECK(r2 < 2e-2, "%s -O2 --fp16 against onnxruntime: rel L2 %.3g", name, r2);
    printf("  %s: -O0 max |diff| %g against onnxruntime, -O2 %g (rel L2 %.3g), -O2 --fp16 rel L2 %.3g\n", name,
           d0, d1, r1, r2);
  }
  gpuc_tensor_free(y0);
  gpuc_tensor_free(y1);
  gpuc_tensor_free(y2);
  /* fresh random inputs: -O2 against -O0 */
  for (int round = 0; round < 3 && g0; round++) {
    Tensor **ins = random_inputs(g0);
    Tensor *a = run1(g0, ins[0], &e), *b = a ? run1(g1, ins[0], &e) : NULL;
    CHECK(b != NULL, "%s random input: %s", name, e.msg);
    if (b) {
      double d = max_abs(b, a), r = rel_l2(b, a);
      CHECK(exact ? d == 0 : r < 1e-2, "%s random input %d: -O2 against -O0 max |diff| %g, rel L2 %.3g", name,
            round, d, r);
    }
    gpuc_tensor_free(a);
    gpuc_tensor_free(b);
    free_inputs(ins);
  }
done:
  gpuc_tensor_free(x);
  gpuc_tensor_free(want);
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
  gpuc_graph_free(g2);
}

static Tensor *tensor(GpucDType dt, int rank, const int64_t *dims, const double *v) {
  GpucErr e;
  Tensor *t = gpuc_tensor_new(dt, rank, dims, &e);
  GPUC_ASSERT(t);
  for (int64_t i = 0; i < gpuc_numel(t); i++) gpuc_set_f64(t, i, v[i]);
  return t;
}

/* Stated values: QLinearMatMul's requantize rounds half to even and
 * saturates. a [2,1] = {1, 3} (u8, zero point 0, scale 1) times b [1,4] =
 * ones (s8) with per-column b_scale {0.5, 1.5, 2.5, 100}, y_scale 1:
 *   acc * M = {0.5, 1.5, 2.5, 100; 1.5, 4.5, 7.5, 300}
 *   y (u8, zp 0)   = {0, 2, 2, 100; 2, 4, 8, 255}
 *   y (s8, zp -3)  = {-3, -1, -1, 97; -1, 1, 5, 127}
 * and ConvInteger pads with 0 after the zero point's shift: x [1,1,1,2] =
 * {5, 7} (u8, zp 5), w [1,1,1,3] = {1, 1, 1} (s8, zp 0), pads 1 each side
 * of W: y = {0 + 0 + 2, 0 + 2 + 0} = {2, 2}. */
static void check_stated(void) {
  int64_t d21[2] = {2, 1}, d14[2] = {1, 4}, d4[1] = {4}, d0[1] = {1};
  for (int s8 = 0; s8 < 2; s8++) {
    Tensor *in[8] = {tensor(GPUC_DT_U8, 2, d21, (double[]){1, 3}), tensor(GPUC_DT_F32, 1, d0, (double[]){1}),
                     tensor(GPUC_DT_U8, 1, d0, (double[]){0}), tensor(GPUC_DT_I8, 2, d14, (double[]){1, 1, 1, 1}),
                     tensor(GPUC_DT_F32, 1, d4, (double[]){0.5, 1.5, 2.5, 100}),
                     tensor(GPUC_DT_I8, 1, d0, (double[]){0}), tensor(GPUC_DT_F32, 1, d0, (double[]){1}),
                     tensor(s8 ? GPUC_DT_I8 : GPUC_DT_U8, 1, d0, (double[]){s8 ? -3 : 0})};
    static const double want[2][8] = {{0, 2, 2, 100, 2, 4, 8, 255}, {-3, -1, -1, 97, -1, 1, 5, 127}};
    Graph *g = gpuc_graph_new("test_qlinear");
    int ni = gpuc_graph_add_node(g, GPUC_OP_QLINEARMATMUL, "qmm", 8, 1);
    for (int k = 0; k < 8; k++) g->nodes[ni].in[k] = gpuc_graph_add_value(g, "i");
    g->nodes[ni].out[0] = 0;
    Tensor *y = NULL;
    GpucErr e = {0};
    CHECK(gpuc_ref_run_node(g, &g->nodes[ni], (const Tensor **)in, &y, &e) == 0, "QLinearMatMul: %s", e.msg);
    for (int i = 0; y && i < 8; i++)
      CHECK(gpuc_get_f64(y, i) == want[s8][i], "QLinearMatMul %s y[%d] = %g, want %g", s8 ? "s8" : "u8", i,
            gpuc_get_f64(y, i), want[s8][i]);
    gpuc_tensor_free(y);
    for (int k = 0; k < 8; k++) gpuc_tensor_free(in[k]);
    gpuc_graph_free(g);
  }
  int64_t dx[4] = {1, 1, 1, 2}, dw[4] = {1, 1, 1, 3};
  Tensor *in[4] = {tensor(GPUC_DT_U8, 4, dx, (double[]){5, 7}), tensor(GPUC_DT_I8, 4, dw, (double[]){1, 1, 1}),
                   tensor(GPUC_DT_U8, 1, d0, (double[]){5}), NULL};
  Graph *g = gpuc_graph_new("test_qlinear");
  int ni = gpuc_graph_add_node(g, GPUC_OP_CONVINTEGER, "cint", 3, 1);
  for (int k = 0; k < 3; k++) g->nodes[ni].in[k] = gpuc_graph_add_value(g, "i");
  g->nodes[ni].out[0] = 0;
  static int64_t pads[4] = {0, 1, 0, 1};
  Attr a = {.name = "pads", .kind = GPUC_ATTR_INTS, .ints = pads, .n = 4};
  g->nodes[ni].attrs = &a;
  g->nodes[ni].nattr = 1;
  Tensor *y = NULL;
  GpucErr e = {0};
  CHECK(gpuc_ref_run_node(g, &g->nodes[ni], (const Tensor **)in, &y, &e) == 0, "ConvInteger: %s", e.msg);
  CHECK(y && y->dt == GPUC_DT_I32 && gpuc_numel(y) == 2 && gpuc_get_f64(y, 0) == 2 && gpuc_get_f64(y, 1) == 2,
        "ConvInteger padded with the zero point: got %g %g, want 2 2", y ? gpuc_get_f64(y, 0) : -1,
        y ? gpuc_get_f64(y, 1) : -1);
  g->nodes[ni].attrs = NULL;
  g->nodes[ni].nattr = 0;
  gpuc_tensor_free(y);
  for (int k = 0; k < 3; k++) gpuc_tensor_free(in[k]);
  gpuc_graph_free(g);
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: test_qlinear DATA_DIR (tests/data/ort_qlinear)\n"); return 2; }
  check_stated();
  /* cnn: the MatMul head is one int8 GEMM (the convs are f32 on integers);
   * mlp: two */
  check_model(argv[1], "cnn_dynamic", true, 1);
  check_model(argv[1], "mlp_dynamic", true, 2);
  check_model(argv[1], "cnn_qop", true, 1);
  check_model(argv[1], "mlp_qop", true, 2);
  check_model(argv[1], "cnn_qop_s8", true, 1); /* s8 activations: no 128 shift */
  check_model(argv[1], "mlp_qop_s8", true, 2);
  check_model(argv[1], "cnn_qdq", false, 1);
  check_model(argv[1], "mlp_qdq", false, 2);
  return check_summary();
}
