/* What each plan step costs, counted from the IR as the steps are made:
 * the numbers `gpuc inspect` lists and `gpuc bench --profile` divides by
 * measured time (achieved GB/s and TFLOP/s against the GPU's peaks).
 *
 * bytes: every distinct tensor among the step's arguments (the step's
 *   arguments are every tensor it touches: a GEMM's A, B, C/bias and Y, a
 *   convolution's X, W, bias, residual and Y), each counted once, in full.
 *   That is DRAM traffic if nothing is reread and nothing is skipped: an
 *   upper bound for gathers and slices, a lower bound for kernels whose
 *   rereads miss the cache.
 * flops: exact for library calls, from their descriptors: a GEMM is
 *   2*M*N*K*batch, a convolution 2 * N*K*P*Q * (C/groups)*R*S (its
 *   epilogue, bias/residual/relu, is not counted). Generated kernels get an
 *   ESTIMATE from their node's op (kernel_flops below). A node that emits
 *   several kernels shares its estimate among them in proportion to the
 *   bytes each moves; the helper kernels of a node lowered to a library call
 *   (pads, bias adds, epilogues) count as data movement. */
#include "lower_util.h"
#include "infer_linalg.h"
#include <stdlib.h>
#include <string.h>

static uint64_t step_bytes(const Plan *p, const PlanStep *s) {
  uint64_t bytes = 0;
  for (uint32_t a = 0; a < s->nargs; a++) {
    uint32_t t = gpuc_plan_base_tensor(p, p->args[s->args + a]);
    bool seen = false;
    for (uint32_t b = 0; b < a && !seen; b++) seen = gpuc_plan_base_tensor(p, p->args[s->args + b]) == t;
    if (!seen) bytes += p->tensors[t].bytes;
  }
  return bytes;
}

static uint64_t numel(const Tensor *t) {
  int64_t n = t ? gpuc_numel(t) : 0;
  return n > 0 ? (uint64_t)n : 0;
}

static uint64_t library_flops(const Plan *p, const PlanStep *s) {
  if (s->kind == PLAN_STEP_GEMM) {
    const PlanGemm *g = &p->gemms[s->index];
    return 2 * (uint64_t)g->m * (uint64_t)g->n * (uint64_t)g->k * (uint64_t)g->batch;
  }
  /* W is [K, C/groups, R, S(, T)]: per output element C/groups * R*S MACs */
  const PlanConv *cv = &p->convs[s->index];
  const PlanTensor *w = &p->tensors[cv->w], *y = &p->tensors[cv->y];
  uint64_t macs = 1, out = 1;
  for (int d = 1; d < w->rank; d++) macs *= (uint64_t)w->dims[d];
  for (int d = 0; d < y->rank; d++) out *= (uint64_t)y->dims[d];
  return 2 * out * macs;
}

/* FLOPs per element of generated kernels: an estimate, not a count of the
 * instructions the kernel runs. An add, multiply, compare, select or a
 * transcendental (exp, erf, ...) is one flop; `per` says whose elements
 * the number multiplies. Ops not listed: elementwise ops one flop per output
 * element per operand pair (Add 1, Sum of 3 inputs 2), reductions one per
 * input element, everything else (reshapes, copies, gathers, pads...) zero. */
enum { PER_OUT, PER_IN, PER_WINDOW /* per output element per window tap */ };
static const struct { GpucOp op; uint8_t per; uint8_t flops; } kernel_cost[] = {
  {GPUC_OP_SOFTMAX, PER_IN, 5},                    /* max, x - max, exp, sum, divide */
  {GPUC_OP_LOGSOFTMAX, PER_IN, 5},                 /* max, x - max, exp, sum, - log */
  {GPUC_OP_SOFTMAXCROSSENTROPYLOSS, PER_IN, 5},    /* a log-softmax, then a pick */
  {GPUC_OP_LAYERNORMALIZATION, PER_IN, 8},         /* mean, var (2), x - mean, * rstd, * scale, + bias */
  {GPUC_OP_ADDLAYERNORMALIZATION, PER_IN, 9},      /* a + b, then LayerNormalization's 8 */
  {GPUC_OP_RMSNORMALIZATION, PER_IN, 4},           /* x * x summed (2), * rstd, * scale */
  {GPUC_OP_ROTARYHALF, PER_OUT, 3},                /* x * cos, r * sin, + */
  {GPUC_OP_GATEDUNIT, PER_OUT, 5},                 /* sigmoid (exp, +, /), * g, * u */
  {GPUC_OP_INSTANCENORMALIZATION, PER_IN, 8},
  {GPUC_OP_MEANVARIANCENORMALIZATION, PER_IN, 6},
  {GPUC_OP_LRN, PER_IN, 12},                       /* squares summed over size (5) channels, pow, divide */
  {GPUC_OP_REDUCEL1, PER_IN, 2},                   /* abs, add */
  {GPUC_OP_REDUCEL2, PER_IN, 2},                   /* square, add */
  {GPUC_OP_REDUCESUMSQUARE, PER_IN, 2},
  {GPUC_OP_REDUCELOGSUMEXP, PER_IN, 3},            /* max, exp, add */
  {GPUC_OP_CUMSUM, PER_IN, 1},
  {GPUC_OP_TOPK, PER_IN, 1},                       /* compares; a full sort does more */
  {GPUC_OP_HARDMAX, PER_IN, 1},
  {GPUC_OP_GATHERGRAD, PER_IN, 1},                 /* scatter-add of dy */
  {GPUC_OP_SOFTMAXCROSSENTROPYLOSSGRAD, PER_OUT, 3}, /* exp, - [k == label], * scale */
  {GPUC_OP_BATCHNORMGRAD, PER_IN, 11},             /* mean, var (2), sum dy, sum dy*xhat (3), dx (5) */
  {GPUC_OP_MAXPOOL, PER_WINDOW, 1},
  {GPUC_OP_AVERAGEPOOL, PER_WINDOW, 1},
  {GPUC_OP_GLOBALAVERAGEPOOL, PER_IN, 1},
  {GPUC_OP_GLOBALMAXPOOL, PER_IN, 1},
  {GPUC_OP_QUANTIZELINEAR, PER_OUT, 4},            /* divide, round, + zero point, clamp */
  {GPUC_OP_DEQUANTIZELINEAR, PER_OUT, 2},          /* - zero point, * scale */
  {GPUC_OP_DYNAMICQUANTIZELINEAR, PER_IN, 6},      /* min, max, then a quantize */
  {GPUC_OP_WHERE, PER_OUT, 1},                     /* a select, whatever the input count */
  {GPUC_OP_NEGATIVELOGLIKELIHOODLOSS, PER_IN, 0},  /* a pick per row */
  {GPUC_OP_CAST, PER_OUT, 0},                      /* conversions and copies move data */
  {GPUC_OP_CASTLIKE, PER_OUT, 0},
  {GPUC_OP_IDENTITY, PER_OUT, 0},
  {GPUC_OP_DROPOUT, PER_OUT, 0},
  {GPUC_OP_DROPOUTTRAIN, PER_OUT, 2},              /* the draw's compare, * scale */
};

static uint64_t kernel_flops(const LowerCtx *c) {
  const Node *n = c->n;
  const Tensor *x = c->nin > 0 ? c->in[0] : NULL, *y = c->nout > 0 ? c->out[0] : NULL;
  if (!y) return 0; /* copies made outside a node (constant graph outputs) */
  switch (n->op) { /* the few whose count follows from shapes, not elements */
  case GPUC_OP_MATMULINTEGER: case GPUC_OP_MATMULINT8: /* 2*K per output element */
    return x && x->rank ? 2 * numel(y) * (uint64_t)x->dims[x->rank - 1] : 0;
  case GPUC_OP_CONVTRANSPOSE: { /* every input element meets C_out/groups * R*S weights */
    const Tensor *w = c->nin > 1 ? c->in[1] : NULL;
    uint64_t taps = 1;
    for (int d = 1; w && d < w->rank; d++) taps *= (uint64_t)w->dims[d];
    return w ? 2 * numel(x) * taps : 0;
  }
  case GPUC_OP_EINSUM: { /* nin-1 multiplies and one add per point of the label space */
    GpucEinsum es;
    GpucErr quiet = {0};
    OpCtx o = {.g = c->g, .n = n, .nin = c->nin, .nout = c->nout, .in = c->in,
               .out = (Tensor **)c->out, .err = &quiet};
    if (gpuc_einsum_parse(&o, &es)) return 0;
    uint64_t points = 1;
    for (int l = 0; l < es.nlab; l++) points *= es.dim[l] > 0 ? (uint64_t)es.dim[l] : 1;
    gpuc_einsum_free(&es);
    return points * (uint64_t)c->nin;
  }
  case GPUC_OP_RESIZE: case GPUC_OP_UPSAMPLE: /* nearest copies; linear ~3 lerps of 2 */
    return strcmp(gpuc_attr_s(n, "mode", "nearest"), "nearest") ? 6 * numel(y) : 0;
  case GPUC_OP_ATTENTION: { /* Q K^T and P V: 2*Sk*(D + Dv) per query row; causal: keys <= the row's */
    GpucAttnGeom a;
    if (gpuc_attention_geom(n, c->in[0], c->in[1], c->in[2], &a)) return 0;
    uint64_t pairs = (uint64_t)a.Sq * (uint64_t)a.Sk;
    if (gpuc_attr_i(n, "causal", 0)) {
      uint64_t m = (uint64_t)(a.Sq < a.Sk ? a.Sq : a.Sk); /* rows i < Sk see i + 1 keys, later rows all Sk */
      pairs = m * (m + 1) / 2 + (uint64_t)(a.Sq - (int64_t)m) * (uint64_t)a.Sk;
    }
    return 2 * (uint64_t)(a.B * a.H) * pairs * (uint64_t)(a.D + a.Dv);
  }
  case GPUC_OP_CONV: case GPUC_OP_FUSEDCONV: { /* all kernels: the depthwise kernel
    * (codegen/lower_dwconv.c), 2 * R*S * C/g per output element */
    const Tensor *w = c->nin > 1 ? c->in[1] : NULL;
    uint64_t taps = 1;
    for (int d = 1; w && d < w->rank; d++) taps *= (uint64_t)w->dims[d];
    return w ? 2 * numel(y) * taps : 0;
  }
  case GPUC_OP_MATMUL: case GPUC_OP_GEMM: case GPUC_OP_CONVGRADINPUT: case GPUC_OP_CONVGRADWEIGHT:
    return 0; /* library calls; their kernels are pads, crops, bias adds, epilogues */
  case GPUC_OP_MAXPOOLGRAD: case GPUC_OP_AVERAGEPOOLGRAD: { /* per dY element: a compare
    * (MaxPool's argmax) or a divide-add (AveragePool) per window tap */
    const int64_t *k;
    int nk = gpuc_attr_ints(n, "kernel_shape", &k);
    uint64_t taps = 1;
    for (int d = 0; d < nk; d++) taps *= k[d] > 0 ? (uint64_t)k[d] : 1;
    return c->nin > 1 ? numel(c->in[1]) * taps : 0;
  }
  case GPUC_OP_BATCHNORMALIZATION: { /* training mode adds the statistics: mean, var (2) */
    bool running = c->nout > 1 && c->out[1];
    bool training = c->g->opset >= 14 ? gpuc_attr_i(n, "training_mode", 0) == 1 : running;
    return (training ? 7 : 4) * numel(x);
  }
  default: break;
  }
  for (size_t i = 0; i < sizeof kernel_cost / sizeof *kernel_cost; i++) {
    if (kernel_cost[i].op != n->op) continue;
    uint64_t f = kernel_cost[i].flops;
    if (kernel_cost[i].per == PER_IN) return f * numel(x);
    if (kernel_cost[i].per == PER_OUT) return f * numel(y);
    const int64_t *k;
    int nk = gpuc_attr_ints(n, "kernel_shape", &k);
    uint64_t taps = 1;
    for (int d = 0; d < nk; d++) taps *= k[d] > 0 ? (uint64_t)k[d] : 1;
    return f * numel(y) * taps;
  }
  unsigned flags = gpuc_ops[n->op].flags;
  if (flags & GPUC_OPF_ELEMWISE) {
    int operands = 0;
    for (int k = 0; k < c->nin; k++) operands += c->in[k] != NULL;
    return numel(y) * (uint64_t)(operands > 1 ? operands - 1 : 1);
  }
  if (flags & GPUC_OPF_REDUCE) return numel(x);
  return 0;
}

int cg_cost_steps(Plan *p, const LowerCtx *c) {
  uint32_t first = p->ncosts, last = p->nsteps;
  if (first >= last) return 0;
  PlanCost *costs = realloc(p->costs, sizeof *costs * last);
  if (!costs) return gpuc_err_set(c->err, "out of memory");
  p->costs = costs;
  uint64_t kernel_bytes = 0;
  uint32_t nkernels = 0, lastk = first;
  bool library = false;
  for (uint32_t i = first; i < last; i++) {
    const PlanStep *s = &p->steps[i];
    costs[i] = (PlanCost){.bytes = step_bytes(p, s)};
    if (s->kind != PLAN_STEP_KERNEL) { costs[i].flops = library_flops(p, s); library = true; continue; }
    kernel_bytes += costs[i].bytes;
    nkernels++;
    lastk = i;
  }
  uint64_t est = nkernels && !library ? kernel_flops(c) : 0, given = 0;
  for (uint32_t i = first; est && i < last; i++) {
    if (p->steps[i].kind != PLAN_STEP_KERNEL) continue;
    /* by bytes; the last kernel takes the rounding so the node's sum is exact */
    uint64_t f = i == lastk ? est - given
               : kernel_bytes ? (uint64_t)((double)est * (double)costs[i].bytes / (double)kernel_bytes)
               : est / nkernels;
    if (f > est - given) f = est - given;
    costs[i].flops = f;
    given += f;
  }
  p->ncosts = last;
  return 0;
}
