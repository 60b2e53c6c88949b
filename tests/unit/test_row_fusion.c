/* passes/fuse_quantize_rows.c and codegen/lower_row_group.c without a GPU:
 *  - which nodes join: QuantizeRows(F8) into the LayerNorm / AddLayerNorm /
 *    RMSNorm, the GatedUnit (LLaMA's SwiGLU: swiglu_mlp), or elementwise
 *    group (dequantize, bias, GELU; Relu) that makes its
 *    row, DequantizeRows into the AddLayerNorm reading it; not when the
 *    row is a graph output, and a norm's Y stays for its other readers;
 *  - the graph the pass leaves computes, on the CPU reference with seeded
 *    random inputs, exactly what the same graph without the row groups
 *    computes, and within int8's/e4m3's error of the fp32 model;
 *  - codegen: the plans compile (NVRTC, sm_80/89/90/120; fp8 from sm_89),
 *    no QuantizeRows or DequantizeRows kernel of their own is left where
 *    they were fused, the fused steps write the int8 row and its scale,
 *    the row the quantize step alone read is never a plan tensor, and the
 *    plan moves fewer bytes than the same graph lowered without the row
 *    groups (counted as gpuc inspect counts them).
 * The kernels' numbers are checked on a GPU by tests/gpu/int8_check.sh and
 * fp8_check.sh (via tests/gpu/compression_round.sh) against the reference.
 * usage: test_row_fusion MODELS_DIR */
#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "int8_gemm.h"
#include "passes.h"
#include "plan.h"
#include "ref.h"
#include "graph_build.h"
#include <math.h>
#include <string.h>

enum { PREC_INT8, PREC_FP8 };

static bool is_quantize(GpucOp op) { return op == GPUC_OP_QUANTIZEROWS || op == GPUC_OP_QUANTIZEROWSF8; }
static bool is_norm(GpucOp op) {
  return op == GPUC_OP_LAYERNORMALIZATION || op == GPUC_OP_ADDLAYERNORMALIZATION || op == GPUC_OP_RMSNORMALIZATION;
}
/* a node whose own kernel takes the quantize (LowerCtx.row): a norm, or LLaMA's GatedUnit */
static bool is_row_head(GpucOp op) { return is_norm(op) || op == GPUC_OP_GATEDUNIT; }

/* The groups the row pass made, undone: a group holding a norm or a
 * GatedUnit loses every member; otherwise its quantize member leaves (the
 * elementwise group that fuse_elementwise made stays as it was). */
static void unfuse_rows(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    int grp = g->nodes[i].fuse_group;
    if (!grp || !is_row_head(g->nodes[i].op)) continue;
    for (int j = 0; j < g->nnodes; j++)
      if (g->nodes[j].fuse_group == grp && j != i) g->nodes[j].fuse_group = 0;
    g->nodes[i].fuse_group = 0;
  }
  for (int i = 0; i < g->nnodes; i++)
    if (is_quantize(g->nodes[i].op)) g->nodes[i].fuse_group = 0;
}

static int passes(Graph *g, int prec, bool fp16) {
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  po.fp16 = fp16;
  po.int8 = prec == PREC_INT8;
  po.fp8 = prec == PREC_FP8;
  GpucErr e = {0};
  int rc = gpuc_passes_run(g, &po, &e);
  CHECK(rc == 0, "passes: %s", e.msg);
  return rc;
}

/* quantize nodes whose fuse_group holds a row head (a norm or a
 * GatedUnit: q_norm) or an elementwise op (q_ew), and DequantizeRows nodes
 * grouped with a norm */
static void count_joined(const Graph *g, int *q_norm, int *q_ew, int *dq_norm, int *q_all) {
  *q_norm = *q_ew = *dq_norm = *q_all = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    *q_all += is_quantize(n->op);
    if (!n->fuse_group || (!is_quantize(n->op) && n->op != GPUC_OP_DEQUANTIZEROWS)) continue;
    bool norm = false, ew = false;
    for (int j = 0; j < g->nnodes; j++) {
      if (j == i || g->nodes[j].fuse_group != n->fuse_group) continue;
      norm |= is_row_head(g->nodes[j].op);
      ew |= (gpuc_ops[g->nodes[j].op].flags & GPUC_OPF_ELEMWISE) != 0 || g->nodes[j].op == GPUC_OP_TRANSPOSE;
    }
    if (is_quantize(n->op)) { *q_norm += norm; *q_ew += ew && !norm; }
    else *dq_norm += norm;
  }
}

/* Steps that are a kernel of its own for op name `opname` ("k12_QuantizeRows"),
 * steps whose covered nodes name a quantize and are not that kernel. */
static int own_kernels(const Plan *p, const char *opname) {
  int n = 0;
  char suffix[64];
  snprintf(suffix, sizeof suffix, "_%s", opname);
  for (uint32_t s = 0; s < p->nsteps; s++) {
    if (p->steps[s].kind != PLAN_STEP_KERNEL) continue;
    const char *k = gpuc_plan_str(p, p->kernels[p->steps[s].index].name);
    size_t lk = strlen(k), ls = strlen(suffix);
    n += lk >= ls && !strcmp(k + lk - ls, suffix);
  }
  return n;
}

static uint64_t plan_bytes(const Plan *p) {
  uint64_t b = 0;
  for (uint32_t s = 0; s < p->nsteps && s < p->ncosts; s++) b += p->costs[s].bytes;
  return b;
}

/* a plan tensor named name? */
static bool has_tensor(const Plan *p, const char *name) {
  for (uint32_t t = 0; t < p->ntensors; t++)
    if (!strcmp(gpuc_plan_str(p, p->tensors[t].name), name)) return true;
  return false;
}

/* The rewritten graph against the fp32 one on the same random inputs:
 * relative L2 per output at most tol (int8 and e4m3 errors are not
 * elementwise-small). */
static void compare_l2(const char *what, Graph *g0, Graph *g1, double tol) {
  GpucErr e = {0};
  Tensor **ins = random_inputs(g0), *o0[MAX_IO] = {0}, *o1[MAX_IO] = {0};
  int r0 = gpuc_ref_run(g0, (const Tensor *const *)ins, o0, &e);
  CHECK(r0 == 0, "%s: run: %s", what, e.msg);
  int r1 = r0 == 0 ? gpuc_ref_run(g1, (const Tensor *const *)ins, o1, &e) : -1;
  CHECK(r1 == 0, "%s: run rewritten: %s", what, e.msg);
  for (int k = 0; r0 == 0 && r1 == 0 && k < g0->noutputs; k++) {
    double err = rel_l2(o1[k], o0[k]);
    CHECK(err <= tol, "%s: output %d: rel L2 %.3g against fp32 (bound %g)", what, k, err, tol);
  }
  free_inputs(ins);
  for (int k = 0; k < MAX_IO; k++) { gpuc_tensor_free(o0[k]); gpuc_tensor_free(o1[k]); }
}

static Plan *codegen(const Graph *g, int sm, bool fp16, const char *what) {
  CodegenOptions co = {.sm = sm, .level = 2, .fp16 = fp16};
  Plan *p = NULL;
  GpucErr e = {0};
  CHECK(gpuc_codegen(g, &co, &p, NULL, &e) == 0 && p, "%s: codegen sm_%d: %s", what, sm, e.msg);
  return p;
}

/* Graph g0 (unrewritten, fp32) and a copy through the passes: the rows
 * joined as wanted, the reference equal with and without the groups, the
 * plans compiled and smaller. want_*: counts of count_joined. */
static void check_graph(const char *what, Graph *(*build)(const void *), const void *arg, int prec, bool fp16,
                        int want_qnorm, int want_qew, int want_dqnorm, double tol_fp32) {
  char tag[160];
  snprintf(tag, sizeof tag, "%s %s%s", what, prec == PREC_FP8 ? "--fp8" : "--int8", fp16 ? " --fp16" : "");
  Graph *g0 = build(arg), *g1 = build(arg), *g2 = build(arg);
  if (!g0 || !g1 || !g2 || passes(g1, prec, fp16) || passes(g2, prec, fp16)) goto done;
  int qn, qe, dqn, qa;
  count_joined(g1, &qn, &qe, &dqn, &qa);
  CHECK(qa > 0 && qn == want_qnorm && qe == want_qew && dqn == want_dqnorm,
        "%s: quantize steps joined to norms %d (want %d), to elementwise groups %d (want %d); dequantize into "
        "norms %d (want %d); %d quantize steps",
        tag, qn, want_qnorm, qe, want_qew, dqn, want_dqnorm, qa);
  unfuse_rows(g2);
  /* the reference ignores groups: the same bits, and int8/e4m3 error against fp32 */
  compare(tag, g2, g1, 0.0);
  compare_l2(tag, g0, g1, tol_fp32);
  /* every target with --fp16 (NVRTC time: the fp32 plans on sm_90 only) */
  int sm0 = !fp16 ? 90 : prec == PREC_FP8 ? 89 : 80;
  for (int sm = sm0; sm <= (fp16 ? 120 : 90); sm = sm == 80 ? 89 : sm == 89 ? 90 : sm == 90 ? 120 : 999) {
    Plan *p1 = codegen(g1, sm, fp16, tag), *p2 = sm == 90 ? codegen(g2, sm, fp16, tag) : NULL;
    if (p1) {
      const char *qop = prec == PREC_FP8 ? "QuantizeRowsF8" : "QuantizeRows";
      CHECK(own_kernels(p1, qop) == qa - qn - qe, "%s sm_%d: %d %s kernels of their own (want %d)", tag, sm,
            own_kernels(p1, qop), qop, qa - qn - qe);
      /* an elementwise row the quantize alone read is never stored */
      for (int i = 0; i < g1->nnodes; i++) {
        const Node *q = &g1->nodes[i];
        if (!is_quantize(q->op) || !q->fuse_group) continue;
        int x = q->in[0], px = g1->values[x].producer;
        bool ew_made = px >= 0 && !is_row_head(g1->nodes[px].op);
        CHECK(has_tensor(p1, g1->values[q->out[0]].name) && has_tensor(p1, g1->values[q->out[1]].name),
              "%s: the fused step writes %s and its scale", tag, g1->values[q->out[0]].name);
        CHECK(!ew_made || !has_tensor(p1, g1->values[x].name), "%s: row %s is not stored", tag, g1->values[x].name);
      }
      /* a norm's (GatedUnit's) Y is stored exactly when something outside its group reads it */
      for (int i = 0; i < g1->nnodes; i++) {
        const Node *n = &g1->nodes[i];
        if (!is_row_head(n->op) || !n->fuse_group) continue;
        int y = n->out[0];
        bool read = g1->values[y].is_output, quantized = false;
        for (int j = 0; j < g1->nnodes; j++) {
          bool reads = false;
          for (int k = 0; k < g1->nodes[j].nin; k++) reads |= g1->nodes[j].in[k] == y;
          read |= reads && g1->nodes[j].fuse_group != n->fuse_group;
          quantized |= g1->nodes[j].fuse_group == n->fuse_group && is_quantize(g1->nodes[j].op);
        }
        CHECK(has_tensor(p1, g1->values[y].name) == (read || !quantized), "%s: norm output %s %s", tag,
              g1->values[y].name, read || !quantized ? "stored (read elsewhere)" : "not stored (only quantized)");
      }
    }
    if (p1 && p2) {
      CHECK(plan_bytes(p1) < plan_bytes(p2) && p1->nsteps < p2->nsteps,
            "%s: fused plan moves %llu bytes in %u steps, unfused %llu in %u", tag,
            (unsigned long long)plan_bytes(p1), p1->nsteps, (unsigned long long)plan_bytes(p2), p2->nsteps);
      if (want_dqnorm)
        CHECK(own_kernels(p1, "DequantizeRows") < own_kernels(p2, "DequantizeRows") ||
                  own_kernels(p2, "DequantizeRows") == 0,
              "%s: fewer DequantizeRows kernels fused", tag);
      printf("  %s: %u steps, %llu bytes (without the row groups: %u steps, %llu bytes)\n", tag, p1->nsteps,
             (unsigned long long)plan_bytes(p1), p2->nsteps, (unsigned long long)plan_bytes(p2));
    }
    gpuc_plan_free(p1);
    gpuc_plan_free(p2);
  }
done:
  gpuc_graph_free(g0);
  gpuc_graph_free(g1);
  gpuc_graph_free(g2);
}

/* x [R, K] -> LayerNorm (RMSNorm when arg[2] != 0) -> y; y -> Linear (K -> K) -> z; Add(z, y) -> out:
 * y has two readers (the quantize and the residual Add); with
 * row_out, y is also a graph output (no quantize may take it then... it
 * still may: the norm writes y either way). */
static Graph *ln_linear(const void *arg) {
  const int64_t *d = arg; /* R, K, rms */
  Graph *g = graph_new(17);
  int64_t xd[2] = {d[0], d[1]}, k1[1] = {d[1]}, w[2] = {d[1], d[1]};
  int x = input(g, "x", 2, xd);
  int y = d[2] ? NODE(g, GPUC_OP_RMSNORMALIZATION, x, constant(g, 1, k1, 11, 0.5, 1.5)) /* LLaMA's */
               : NODE(g, GPUC_OP_LAYERNORMALIZATION, x, constant(g, 1, k1, 11, 0.5, 1.5),
                      constant(g, 1, k1, 12, -0.2, 0.2));
  attr_i(g, "axis", -1);
  attr_f(g, "epsilon", 1e-5f);
  int z = NODE(g, GPUC_OP_MATMUL, y, constant(g, 2, w, 13, -0.2, 0.2));
  int zb = NODE(g, GPUC_OP_ADD, z, constant(g, 1, k1, 14, -0.1, 0.1));
  output(g, NODE(g, GPUC_OP_ADD, zb, y));
  return g;
}

/* x [R, K] -> Linear (K -> 4K) -> Relu -> Linear (4K -> K) -> + x ->
 * LayerNorm -> out: the Relu row quantized in its group, the second
 * layer's dequantize inside the AddLayerNormalization. */
static Graph *mlp_ln(const void *arg) {
  const int64_t *d = arg;
  Graph *g = graph_new(17);
  int64_t xd[2] = {d[0], d[1]}, k1[1] = {d[1]}, n1[1] = {4 * d[1]}, w1[2] = {d[1], 4 * d[1]}, w2[2] = {4 * d[1], d[1]};
  int x = input(g, "x", 2, xd);
  int h = NODE(g, GPUC_OP_MATMUL, x, constant(g, 2, w1, 21, -0.2, 0.2));
  h = NODE(g, GPUC_OP_ADD, h, constant(g, 1, n1, 22, -0.1, 0.1));
  h = NODE(g, GPUC_OP_RELU, h);
  int z = NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, w2, 23, -0.2, 0.2));
  z = NODE(g, GPUC_OP_ADD, z, constant(g, 1, k1, 24, -0.1, 0.1));
  int s = NODE(g, GPUC_OP_ADD, z, x);
  int y = NODE(g, GPUC_OP_LAYERNORMALIZATION, s, constant(g, 1, k1, 25, 0.5, 1.5), constant(g, 1, k1, 26, -0.2, 0.2));
  attr_i(g, "axis", -1);
  output(g, y);
  return g;
}

static int shape_const(Graph *g, int rank, const int64_t *dims);

/* attention's heads merged back: x [B, H, S, D] -> Transpose(0, 2, 1, 3)
 * -> Reshape [B, S, H * D] -> Linear (H * D -> H * D) -> out. The quantize
 * reads the heads through the Transpose's strides and the Reshape (a
 * view); neither is stored. */
static Graph *heads_linear(const void *arg) {
  const int64_t *d = arg; /* B, H, S, D, and 1: a second Reshape to [B*S, H*D] (GPT-2's Conv1D) */
  Graph *g = graph_new(17);
  int64_t xd[4] = {d[0], d[1], d[2], d[3]}, hd = d[1] * d[3], w[2] = {hd, hd}, perm[4] = {0, 2, 1, 3};
  int x = input(g, "x", 4, xd);
  int t = transpose(g, x, 4, perm);
  char name[32];
  snprintf(name, sizeof name, "shape%d", g->nvalues);
  int sv = gpuc_graph_add_value(g, name);
  int64_t three = 3;
  GpucErr e = {0};
  Tensor *st = gpuc_tensor_new(GPUC_DT_I64, 1, &three, &e);
  GPUC_ASSERT(st);
  int64_t *sd = st->data;
  sd[0] = d[0]; sd[1] = d[2]; sd[2] = hd;
  g->values[sv].t = *st;
  free(st);
  g->values[sv].is_const = true;
  int r = NODE(g, GPUC_OP_RESHAPE, t, sv);
  if (d[4]) {
    const int64_t flat[2] = {d[0] * d[2], hd};
    r = NODE(g, GPUC_OP_RESHAPE, r, shape_const(g, 2, flat));
  }
  output(g, NODE(g, GPUC_OP_MATMUL, r, constant(g, 2, w, 31, -0.2, 0.2)));
  return g;
}

static int shape_const(Graph *g, int rank, const int64_t *dims) {
  char name[32];
  snprintf(name, sizeof name, "shape%d", g->nvalues);
  int sv = gpuc_graph_add_value(g, name);
  int64_t r = rank;
  GpucErr e = {0};
  Tensor *st = gpuc_tensor_new(GPUC_DT_I64, 1, &r, &e);
  GPUC_ASSERT(st);
  memcpy(st->data, dims, sizeof(int64_t) * (size_t)rank);
  g->values[sv].t = *st;
  free(st);
  g->values[sv].is_const = true;
  return sv;
}

/* GPT-2's Conv1D: x [B, S, K] -> (Reshape [B*S, K]) -> Linear -> (Reshape
 * [B, S, K]) -> + x -> out; arg[4] = 1: with the Reshapes. */
static Graph *conv1d_residual(const void *arg) {
  const int64_t *d = arg; /* B, S, K, -, reshape */
  Graph *g = graph_new(17);
  int64_t xd[3] = {d[0], d[1], d[2]}, flat[2] = {d[0] * d[1], d[2]}, k1[1] = {d[2]}, w[2] = {d[2], d[2]};
  int x = input(g, "x", 3, xd), h = x;
  if (d[4]) h = NODE(g, GPUC_OP_RESHAPE, x, shape_const(g, 2, flat));
  h = NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, w, 41, -0.2, 0.2));
  h = NODE(g, GPUC_OP_ADD, h, constant(g, 1, k1, 42, -0.1, 0.1));
  if (d[4]) h = NODE(g, GPUC_OP_RESHAPE, h, shape_const(g, 3, xd));
  output(g, NODE(g, GPUC_OP_ADD, h, x));
  return g;
}

/* The dequantize moved behind GPT-2's Reshape (passes/quantize_int8.c):
 * the same bits as the graph without Reshapes, and one group with the
 * residual Add. */
static void check_dequantize_reshape(bool fp16) {
  const int64_t with[5] = {2, 12, 64, 0, 1}, without[5] = {2, 12, 64, 0, 0};
  Graph *a = conv1d_residual(with), *b = conv1d_residual(without);
  if (!passes(a, PREC_INT8, fp16) && !passes(b, PREC_INT8, fp16)) {
    int dq = -1;
    for (int i = 0; i < a->nnodes; i++)
      if (a->nodes[i].op == GPUC_OP_DEQUANTIZEROWS) dq = i;
    const Tensor *y = dq >= 0 ? &a->values[a->nodes[dq].out[0]].t : NULL;
    bool grouped = false;
    for (int i = 0; dq >= 0 && i < a->nnodes; i++)
      grouped |= i != dq && a->nodes[dq].fuse_group && a->nodes[i].fuse_group == a->nodes[dq].fuse_group &&
                 a->nodes[i].op == GPUC_OP_ADD;
    CHECK(y && y->rank == 3 && y->dims[0] == 2 && y->dims[1] == 12 && grouped,
          "conv1d%s: DequantizeRows writes [2,12,64] in the residual Add's group", fp16 ? " --fp16" : "");
    compare(fp16 ? "conv1d --int8 --fp16: with vs without Reshapes" : "conv1d --int8: with vs without Reshapes", b,
            a, 0.0);
    Plan *p = codegen(a, 90, fp16, "conv1d");
    CHECK(p && own_kernels(p, "DequantizeRows") == 0, "conv1d: no DequantizeRows kernel of its own");
    gpuc_plan_free(p);
  }
  gpuc_graph_free(a);
  gpuc_graph_free(b);
}

/* GPT-2's pre-LN: x [B, S, K] -> LayerNorm -> Reshape [B*S, K] -> Linear
 * -> Reshape -> + x: the LayerNorm's Y only feeds the quantize (not stored). */
static Graph *preln_conv1d(const void *arg) {
  const int64_t *d = arg; /* B, S, K */
  Graph *g = graph_new(17);
  int64_t xd[3] = {d[0], d[1], d[2]}, flat[2] = {d[0] * d[1], d[2]}, k1[1] = {d[2]}, w[2] = {d[2], d[2]};
  int x = input(g, "x", 3, xd);
  int y = NODE(g, GPUC_OP_LAYERNORMALIZATION, x, constant(g, 1, k1, 51, 0.5, 1.5), constant(g, 1, k1, 52, -0.2, 0.2));
  attr_i(g, "axis", -1);
  int h = NODE(g, GPUC_OP_RESHAPE, y, shape_const(g, 2, flat));
  h = NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, w, 53, -0.2, 0.2));
  h = NODE(g, GPUC_OP_ADD, h, constant(g, 1, k1, 54, -0.1, 0.1));
  h = NODE(g, GPUC_OP_RESHAPE, h, shape_const(g, 3, xd));
  output(g, NODE(g, GPUC_OP_ADD, h, x));
  return g;
}

/* x [4, 16] -> Linear (16 -> 8704) -> Relu -> Linear (8704 -> 8): rows of
 * 8704 are past the row kernel's registers (32 a thread): the quantize
 * stays a kernel of its own, the dequantize and Relu one group still. */
static void check_wide_rows(void) {
  Graph *g = graph_new(17);
  int64_t xd[2] = {4, 16}, w1[2] = {16, 8704}, b1[1] = {8704}, w2[2] = {8704, 8};
  int x = input(g, "x", 2, xd);
  int h = NODE(g, GPUC_OP_MATMUL, x, constant(g, 2, w1, 61, -0.2, 0.2));
  h = NODE(g, GPUC_OP_ADD, h, constant(g, 1, b1, 62, -0.1, 0.1));
  h = NODE(g, GPUC_OP_RELU, h);
  output(g, NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, w2, 63, -0.2, 0.2)));
  if (!passes(g, PREC_INT8, false)) {
    Plan *p = codegen(g, 90, false, "wide rows");
    int fused2 = p ? own_kernels(p, "Fused2") : 0;
    CHECK(p && own_kernels(p, "QuantizeRows") == 2 && fused2 == 1,
          "rows of 8704: the quantize of its own (%d QuantizeRows kernels, want 2), dequantize + Relu one kernel (%d)",
          p ? own_kernels(p, "QuantizeRows") : -1, fused2);
    gpuc_plan_free(p);
  }
  gpuc_graph_free(g);
}

/* LLaMA's MLP: x [R, K] -> RMSNorm -> gate and up Linears (K -> F, no
 * bias) -> Mul(Mul(g, Sigmoid(g)), u) -> down (F -> K) -> + x -> out.
 * fuse_gated_mlp makes the gate/up GEMM one and the SwiGLU a GatedUnit;
 * the down projection's quantize joins the GatedUnit's kernel (a row
 * kernel then: F 2048, LLaMA's, two warps a row), as the gate/up one joins
 * the RMSNorm. With arg[3] the SwiGLU's Y is a graph output too: the
 * row kernel stores it as well (fp32; with --fp16 the Cast to the f32
 * output stands before the quantize in node order, and a group is lowered
 * where its last member stands: not joined). */
static Graph *swiglu_mlp(const void *arg) {
  const int64_t *d = arg; /* R, K, F, y out */
  Graph *g = graph_new(17);
  int64_t xd[2] = {d[0], d[1]}, k1[1] = {d[1]}, wi[2] = {d[1], d[2]}, wo[2] = {d[2], d[1]};
  int x = input(g, "x", 2, xd);
  int h = NODE(g, GPUC_OP_RMSNORMALIZATION, x, constant(g, 1, k1, 71, 0.5, 1.5));
  attr_i(g, "axis", -1);
  attr_f(g, "epsilon", 1e-5f);
  int gv = NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, wi, 72, -0.2, 0.2));
  int u = NODE(g, GPUC_OP_MATMUL, h, constant(g, 2, wi, 73, -0.2, 0.2));
  int y = NODE(g, GPUC_OP_MUL, NODE(g, GPUC_OP_MUL, gv, NODE(g, GPUC_OP_SIGMOID, gv)), u);
  int z = NODE(g, GPUC_OP_MATMUL, y, constant(g, 2, wo, 74, -0.2, 0.2));
  output(g, NODE(g, GPUC_OP_ADD, z, x));
  if (d[3]) output(g, y);
  return g;
}

/* Where the target's int8 GEMM takes its dequantize as an epilogue
 * (PassOptions.int8_gemm_epilogue), the row pass leaves it there: mlp_ln
 * at 2048 x 768 on sm_80 and sm_90, --fp16 (fp32 rows weigh what int32
 * sums do: the fp32 plan keeps the row kernels). FC1 (N 3072) writes half rows with
 * its bias and Relu, a QuantizeRows kernel of its own reads them, and its
 * int32 sums are not stored; the plan moves fewer bytes than the one whose
 * row kernels load the sums, in as many steps. On sm_90 FC2 (N 768, K
 * 3072) takes its dequantize too, and the AddLayerNormalization reads
 * half; on sm_80 it stays in the norm (the mma.sync kernel takes N >=
 * 2048 only). GPUC_INT8_ROW_DEQUANT=1 gives the row kernels back. */
static void check_dequant_in_gemm(bool fp16) {
  const int64_t d[3] = {2048, 768, 0};
  for (int sm = 80; sm <= 90; sm += 10) {
    char tag[96];
    snprintf(tag, sizeof tag, "dequantize in the GEMM sm_%d%s", sm, fp16 ? " --fp16" : "");
    Graph *g[3] = {mlp_ln(d), mlp_ln(d), mlp_ln(d)};
    Plan *p[3] = {NULL, NULL, NULL};
    for (int v = 0; v < 3; v++) {
      PassOptions po;
      gpuc_pass_options_default(&po, 2);
      po.fp16 = fp16;
      po.int8 = true;
      po.sm = sm;
      po.int8_gemm_epilogue = v == 1 ? NULL : cg_int8_gemm_takes_epilogue;
      if (v == 2) setenv("GPUC_INT8_ROW_DEQUANT", "1", 1);
      GpucErr e = {0};
      CHECK(g[v] && gpuc_passes_run(g[v], &po, &e) == 0, "%s: passes: %s", tag, e.msg);
      unsetenv("GPUC_INT8_ROW_DEQUANT");
      if (g[v]) p[v] = codegen(g[v], sm, fp16, tag);
    }
    if (p[0] && p[1] && p[2]) {
      int qn, qe, dqn, qa;
      count_joined(g[0], &qn, &qe, &dqn, &qa);
      CHECK(qa == 2 && qn == 0 && qe == 0 && dqn == (sm == 90 ? 0 : 1),
            "%s: quantizes joined to groups %d, dequantizes into the norm %d (want 0, %d)", tag, qe, dqn,
            sm == 90 ? 0 : 1);
      CHECK(own_kernels(p[0], "QuantizeRows") == own_kernels(p[1], "QuantizeRows") + 1,
            "%s: FC2's input quantized by a kernel of its own (%d, row kernels %d)", tag,
            own_kernels(p[0], "QuantizeRows"), own_kernels(p[1], "QuantizeRows"));
      int fc1_sums = -1; /* the first MatMulInt8's int32 output */
      for (int i = 0; i < g[0]->nnodes && fc1_sums < 0; i++)
        if (g[0]->nodes[i].op == GPUC_OP_MATMULINT8) fc1_sums = g[0]->nodes[i].out[0];
      CHECK(fc1_sums >= 0 && !has_tensor(p[0], g[0]->values[fc1_sums].name) &&
                has_tensor(p[1], g[1]->values[fc1_sums].name),
            "%s: FC1's int32 sums stored only where a row kernel reads them", tag);
      CHECK(plan_bytes(p[0]) < plan_bytes(p[1]) && p[0]->nsteps == p[1]->nsteps,
            "%s: %llu bytes in %u steps, the sums in row kernels %llu in %u", tag,
            (unsigned long long)plan_bytes(p[0]), p[0]->nsteps, (unsigned long long)plan_bytes(p[1]), p[1]->nsteps);
      CHECK(plan_bytes(p[2]) == plan_bytes(p[1]) && p[2]->nsteps == p[1]->nsteps,
            "%s: GPUC_INT8_ROW_DEQUANT=1 keeps the row kernels' plan", tag);
      /* the pass asks the builder's own test, not the shape alone: sums
       * that another node (here: the graph's outputs) reads keep the GEMM
       * writing int32, and the dequantize then belongs to a row kernel */
      if (fc1_sums >= 0) {
        int mm = g[0]->values[fc1_sums].producer;
        bool before = cg_int8_gemm_takes_epilogue(g[0], mm, sm);
        g[0]->values[fc1_sums].is_output = true;
        bool shared = cg_int8_gemm_takes_epilogue(g[0], mm, sm);
        g[0]->values[fc1_sums].is_output = false;
        CHECK(before && !shared, "%s: FC1 takes its epilogue %d (want 1), with its sums an output %d (want 0)", tag,
              before, shared);
      }
      printf("  %s: %u steps, %llu bytes (the sums in row kernels: %llu bytes)\n", tag, p[0]->nsteps,
             (unsigned long long)plan_bytes(p[0]), (unsigned long long)plan_bytes(p[1]));
    }
    for (int v = 0; v < 3; v++) {
      gpuc_plan_free(p[v]);
      gpuc_graph_free(g[v]);
    }
  }
}

static const char *models_dir;
static Graph *ffn_block(const void *arg) {
  (void)arg;
  char path[4096];
  snprintf(path, sizeof path, "%s/ffn_block.onnx", models_dir);
  GpucShapeBind b = {.name = "x", .rank = 3, .dims = {4, 16, 64}};
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, &b, 1, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  return g;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: test_row_fusion MODELS_DIR\n"); return 2; }
  models_dir = argv[1];
  const int64_t small[3] = {24, 96, 0}, bert[3] = {8, 768, 0}, odd[3] = {5, 40, 0}, rms[3] = {24, 512, 1};
  check_wide_rows();
  check_dequant_in_gemm(true);
  for (int fp16 = 0; fp16 <= 1; fp16++) {
    /* the LayerNorm's Y: quantized there, kept for the residual */
    check_graph("ln_linear 24x96", ln_linear, small, PREC_INT8, fp16, 1, 0, 0, 2e-2);
    check_graph("ln_linear 8x768", ln_linear, bert, PREC_INT8, fp16, 1, 0, 0, 2e-2);
    check_graph("ln_linear 5x40", ln_linear, odd, PREC_INT8, fp16, 1, 0, 0, 2e-2);
    check_graph("rmsnorm_linear 24x512", ln_linear, rms, PREC_INT8, fp16, 1, 0, 0, 2e-2);
    /* Relu group + quantize; dequantize into AddLayerNorm (fuse_add_layernorm made it) */
    check_graph("mlp_ln 24x96", mlp_ln, small, PREC_INT8, fp16, 0, 1, fp16 ? 1 : 1, 2e-2);
    check_graph("mlp_ln 8x768", mlp_ln, bert, PREC_INT8, fp16, 0, 1, 1, 2e-2);
    /* PyTorch's BERT feed-forward block: erf GELU group + quantize, dequantize into AddLayerNorm */
    check_graph("ffn_block", ffn_block, NULL, PREC_INT8, fp16, 0, 1, 1, 2e-2);
    /* LLaMA's SwiGLU: the GatedUnit quantizes its row (and the RMSNorm its) */
    const int64_t llama[4] = {24, 64, 2048, 0}, narrow[4] = {5, 32, 36, 0}, yout[4] = {24, 64, 2048, 1};
    /* two int8 GEMMs into a product of two GEMM outputs: 2.6e-2 of fp32 seen */
    check_graph("swiglu_mlp 24x64x2048", swiglu_mlp, llama, PREC_INT8, fp16, 2, 0, 0, 4e-2);
    check_graph("swiglu_mlp 5x32x36", swiglu_mlp, narrow, PREC_INT8, fp16, 2, 0, 0, 4e-2);
    check_graph("swiglu_mlp Y an output", swiglu_mlp, yout, PREC_INT8, fp16, fp16 ? 1 : 2, 0, 0, 4e-2);
    check_graph("swiglu_mlp 24x64x2048", swiglu_mlp, llama, PREC_FP8, fp16, 2, 0, 0, 8e-2);
    check_dequantize_reshape(fp16);
    const int64_t preln[3] = {2, 12, 64};
    check_graph("preln_conv1d 2x12x64", preln_conv1d, preln, PREC_INT8, fp16, 1, 0, 0, 2e-2);
    check_graph("preln_conv1d 2x12x64", preln_conv1d, preln, PREC_FP8, fp16, 1, 0, 0, 8e-2);
    const int64_t heads[5] = {2, 4, 8, 32, 0}, heads2[5] = {2, 4, 8, 32, 1};
    check_graph("heads_linear 2x4x8x32", heads_linear, heads, PREC_INT8, fp16, 0, 1, 0, 2e-2);
    check_graph("heads_linear two Reshapes", heads_linear, heads2, PREC_INT8, fp16, 0, 1, 0, 2e-2);
    check_graph("heads_linear 2x4x8x32", heads_linear, heads, PREC_FP8, fp16, 0, 1, 0, 8e-2);
    check_graph("ln_linear 24x96", ln_linear, small, PREC_FP8, fp16, 1, 0, 0, 8e-2);
    check_graph("rmsnorm_linear 24x512", ln_linear, rms, PREC_FP8, fp16, 1, 0, 0, 8e-2);
    check_graph("mlp_ln 8x768", mlp_ln, bert, PREC_FP8, fp16, 0, 1, 0, 8e-2);
    check_graph("ffn_block", ffn_block, NULL, PREC_FP8, fp16, 0, 1, 0, 8e-2);
  }
  return check_summary();
}
