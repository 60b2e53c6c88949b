/* The code generator's driver: graph values -> plan tensors, each node ->
 * lower_<Op>, then memory planning, weights, and the NVRTC compile. */
#include "lower_util.h"
#include "ew_kernel.h"
#include "int8_gemm.h"
#include "device_fault.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GROW(arr, n, cap)                                                       \
  (((n) < (cap)) ? 0 : ((cap) = (cap) ? (cap) * 2 : 64,                         \
                        ((arr) = realloc((arr), sizeof(*(arr)) * (cap))) ? 0 : -1))

/* Step `step` reads tensor `in` and writes `out` element for element
 * (each element of out computed from the same element of in, read before
 * it is written): out may take in's bytes if in dies at this step. */
typedef struct { uint32_t step, in, out; } InPlaceHint;

struct PlanBuilder {
  Plan *p;
  uint32_t cap_tensors, cap_kernels, cap_steps, cap_tune, cap_args, cap_gemms, cap_convs, cap_tmaps;
  StrBuf strings, src;
  uint32_t *value_tensor;        /* graph value -> plan tensor, UINT32_MAX none */
  uint64_t lower_bound;          /* most arena bytes live at one step */
  InPlaceHint *inplace;          /* steps that may write an output over a dying input */
  uint32_t ninplace, cap_inplace;
  uint32_t inplace_shared;       /* tensors the planner placed over their input */
  bool fault_emitted;            /* the device error record is in the module (cg_fault_step) */
  bool arch_specific;            /* a kernel needs sm_XXa (cg_mark_arch_specific) */
  const Graph *g;
  const CodegenOptions *opt;
  GpucErr *e;
  bool oom;
  /* per node: a MatMulInt8 whose sums stay in registers for its reader's
   * epilogue (codegen/lower_int8_gemm.c); epilogue_of: that reader's GEMM
   * node, -1 for other nodes */
  bool *in_epilogue;
  int *epilogue_of;
};

/* ---- string buffers ---- */
void sb_vprintf(StrBuf *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = true; return; }
    b->s = s;
    b->cap = cap;
  }
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void sb_printf(StrBuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(b, fmt, ap);
  va_end(ap);
}

static uint32_t add_string(PlanBuilder *pb, const char *s) {
  uint32_t off = (uint32_t)pb->strings.len;
  sb_printf(&pb->strings, "%s", s);
  sb_printf(&pb->strings, "%c", 0);
  pb->strings.len = off + strlen(s) + 1; /* the NUL counts */
  return off;
}

const char *cg_ctype(GpucDType dt) {
  switch (dt) {
  case GPUC_DT_F32: return "float";
  case GPUC_DT_F16: return "__half";
  case GPUC_DT_BF16: return "__nv_bfloat16";
  case GPUC_DT_F64: return "double";
  case GPUC_DT_I8: return "signed char";
  case GPUC_DT_U8: return "unsigned char";
  case GPUC_DT_I16: return "short";
  case GPUC_DT_U16: return "unsigned short";
  case GPUC_DT_I32: return "int";
  case GPUC_DT_U32: return "unsigned int";
  case GPUC_DT_I64: return "long long";
  case GPUC_DT_U64: return "unsigned long long";
  case GPUC_DT_BOOL: return "unsigned char";
  case GPUC_DT_F8E4M3: return "unsigned char"; /* e4m3 bits (--fp8) */
  default: return "void";
  }
}

/* ---- tensors ---- */
static uint32_t new_tensor(PlanBuilder *pb, const char *name, const Tensor *t, int mem, int role) {
  Plan *p = pb->p;
  if (GROW(p->tensors, p->ntensors, pb->cap_tensors)) { pb->oom = true; return UINT32_MAX; }
  PlanTensor *pt = &p->tensors[p->ntensors];
  memset(pt, 0, sizeof *pt);
  pt->name = add_string(pb, name);
  pt->dt = (uint8_t)t->dt;
  pt->rank = (uint8_t)t->rank;
  for (int i = 0; i < t->rank; i++) pt->dims[i] = t->dims[i];
  pt->mem = (uint8_t)mem;
  pt->role = (uint8_t)role;
  pt->bytes = gpuc_tensor_bytes(t);
  return p->ntensors++;
}

/* Tensor t's bytes appended to the weights blob as plan tensor `pt`. */
static uint32_t append_weights(PlanBuilder *pb, uint32_t pt, const Tensor *t) {
  Plan *p = pb->p;
  uint64_t off = (p->weights_size + GPUC_PLAN_ALIGN - 1) & ~(uint64_t)(GPUC_PLAN_ALIGN - 1);
  uint64_t bytes = gpuc_tensor_bytes(t);
  uint8_t *w = realloc(p->weights, off + bytes + 1);
  if (!w) { pb->oom = true; return UINT32_MAX; }
  memset(w + p->weights_size, 0, off - p->weights_size);
  if (bytes) memcpy(w + off, t->data, bytes);
  p->weights = w;
  p->weights_size = off + bytes;
  p->tensors[pt].offset = off;
  return pt;
}

/* Plan tensor for graph value v (created on first use). Constants go to the
 * weights blob, with their bytes appended now. */
static uint32_t value_tensor(PlanBuilder *pb, int v) {
  if (pb->value_tensor[v] != UINT32_MAX) return pb->value_tensor[v];
  const Value *val = &pb->g->values[v];
  int role = val->is_input ? PLAN_ROLE_INPUT : val->is_const ? PLAN_ROLE_CONST : PLAN_ROLE_INTERNAL;
  if (val->is_output) role = val->is_input ? PLAN_ROLE_INPUT_OUTPUT : PLAN_ROLE_OUTPUT;
  uint32_t t = new_tensor(pb, val->name, &val->t, val->is_const ? PLAN_MEM_WEIGHTS : PLAN_MEM_ARENA, role);
  if (t == UINT32_MAX) return t;
  if (val->is_const && append_weights(pb, t, &val->t) == UINT32_MAX) return UINT32_MAX;
  pb->value_tensor[v] = t;
  return t;
}

static bool capturing(LowerCtx *c);

uint32_t cg_weights(LowerCtx *c, const char *name, const Tensor *t) {
  if (capturing(c)) return UINT32_MAX;
  uint32_t pt = new_tensor(c->pb, name, t, PLAN_MEM_WEIGHTS, PLAN_ROLE_CONST);
  return pt == UINT32_MAX ? pt : append_weights(c->pb, pt, t);
}

/* Fusion capture (LowerCtx.capture): helpers that would emit something
 * mark the node as not inlinable and do nothing. */
static bool capturing(LowerCtx *c) {
  if (!c->capture) return false;
  c->capture->other = true;
  return true;
}

uint32_t cg_scratch(LowerCtx *c, GpucDType dt, int rank, const int64_t *dims) {
  if (capturing(c)) return UINT32_MAX;
  Tensor t = {.dt = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  char name[160];
  snprintf(name, sizeof name, "%s.scratch%u", c->n->name, c->pb->p->ntensors);
  return new_tensor(c->pb, name, &t, PLAN_MEM_ARENA, PLAN_ROLE_INTERNAL);
}

int cg_alias(LowerCtx *c, int o, uint32_t src) {
  if (capturing(c)) return 1;
  PlanTensor *t = &c->pb->p->tensors[c->tout[o]], *s = &c->pb->p->tensors[src];
  if (t->bytes != s->bytes) return gpuc_op_fail(&(OpCtx){.g = c->g, .n = c->n, .err = c->err},
                                                "internal: alias of a different size");
  while (s->mem == PLAN_MEM_ALIAS) { src = (uint32_t)s->offset; s = &c->pb->p->tensors[src]; }
  if (s->mem == PLAN_MEM_WEIGHTS || s->role == PLAN_ROLE_INPUT || t->role == PLAN_ROLE_OUTPUT)
    return 1; /* caller copies instead: views of weights/inputs, or graph outputs */
  t->mem = PLAN_MEM_ALIAS;
  t->offset = src;
  return 0;
}

/* ---- steps ---- */
StrBuf *cg_src(LowerCtx *c) { return &c->pb->src; }

const char *cg_kernel_name(LowerCtx *c) {
  static char name[128];
  if (c->nkernels_emitted++ == 0) snprintf(name, sizeof name, "%s", c->kname);
  else snprintf(name, sizeof name, "%s_%d", c->kname, c->nkernels_emitted);
  return name;
}

static uint32_t node_label(LowerCtx *c) { return add_string(c->pb, c->label ? c->label : c->n->name); }

/* tune: what -O3 may change in the step (NULL: nothing) */
static int add_step(LowerCtx *c, PlanStep *s, const PlanTune *tune, int nargs, const uint32_t *args) {
  Plan *p = c->pb->p;
  if (GROW(p->steps, p->nsteps, c->pb->cap_steps) || GROW(p->tune, p->ntune, c->pb->cap_tune))
    return gpuc_err_set(c->err, "out of memory");
  s->args = p->nargs;
  s->nargs = (uint32_t)nargs;
  for (int i = 0; i < nargs; i++) {
    if (GROW(p->args, p->nargs, c->pb->cap_args)) return gpuc_err_set(c->err, "out of memory");
    p->args[p->nargs++] = args[i];
  }
  s->nodes = node_label(c);
  p->steps[p->nsteps++] = *s;
  p->tune[p->ntune++] = tune ? *tune : (PlanTune){0};
  return 0;
}

static int launch(LowerCtx *c, const char *name, const unsigned grid[3], const unsigned block[3],
                  unsigned shmem, const PlanTune *tune, int nargs, const uint32_t *args) {
  if (capturing(c)) return 0;
  Plan *p = c->pb->p;
  if (GROW(p->kernels, p->nkernels, c->pb->cap_kernels)) return gpuc_err_set(c->err, "out of memory");
  p->kernels[p->nkernels] = (PlanKernel){.name = add_string(c->pb, name)};
  PlanStep s = {.kind = PLAN_STEP_KERNEL, .index = p->nkernels++, .shmem = shmem};
  for (int i = 0; i < 3; i++) { s.grid[i] = grid[i]; s.block[i] = block[i]; }
  return add_step(c, &s, tune, nargs, args);
}

int cg_launch_grid(LowerCtx *c, const char *name, const unsigned grid[3], const unsigned block[3],
                   unsigned shmem, int nargs, const uint32_t *args) {
  return launch(c, name, grid, block, shmem, NULL, nargs, args);
}

int cg_launch(LowerCtx *c, const char *name, uint64_t threads, unsigned block, unsigned shmem,
              int nargs, const uint32_t *args) {
  /* kernels loop grid-stride, so the grid may be capped */
  unsigned grid[3] = {gpuc_plan_items_grid(threads, block), 1, 1}, blk[3] = {block, 1, 1};
  return launch(c, name, grid, blk, shmem, NULL, nargs, args);
}

int cg_launch_items(LowerCtx *c, const char *name, uint64_t items, int nargs, const uint32_t *args) {
  if (capturing(c)) return 0;
  PlanTune t = {0};
  const char *why = cg_items_kernel_check(c->pb->src.s, c->src_start, name, &t.src_hash);
  if (why)
    return lower_fail(c, "internal error: kernel %s, launched as block-size free, fails the items check: %s", name,
                      why);
  if (items) { t.items = items; t.flags = PLAN_TUNE_F_BLOCK_FREE; } /* none: nothing to tune */
  unsigned grid[3] = {gpuc_plan_items_grid(items, GPUC_ITEMS_BLOCK), 1, 1}, blk[3] = {GPUC_ITEMS_BLOCK, 1, 1};
  return launch(c, name, grid, blk, 0, &t, nargs, args);
}

int cg_gemm(LowerCtx *c, const PlanGemm *g) { return cg_gemm_flagged(c, g, 0); }

int cg_gemm_flagged(LowerCtx *c, const PlanGemm *g, uint32_t flags) {
  if (capturing(c)) return 0;
  Plan *p = c->pb->p;
  if (GROW(p->gemms, p->ngemms, c->pb->cap_gemms)) return gpuc_err_set(c->err, "out of memory");
  p->gemms[p->ngemms] = *g;
  p->gemms[p->ngemms].flags |= flags;
  gpuc_plan_gemm_defaults(&p->gemms[p->ngemms]);
  PlanStep s = {.kind = PLAN_STEP_GEMM, .index = p->ngemms++};
  uint32_t args[6] = {g->a, g->b, g->y, g->c};
  if (p->gemms[p->ngemms - 1].flags & PLAN_GEMM_F_BIAS_C) { /* C and the bias row */
    args[4] = g->reserved;
    return add_step(c, &s, NULL, 5, args);
  }
  if (g->compute == PLAN_GEMM_COMPUTE_F8) { /* its scale vectors are read too */
    uint32_t n = g->c == UINT32_MAX ? 3 : 4;
    args[n++] = (uint32_t)g->stride_a;
    args[n++] = (uint32_t)g->stride_b;
    return add_step(c, &s, NULL, n, args);
  }
  return add_step(c, &s, NULL, g->c == UINT32_MAX ? 3 : 4, args);
}

int cg_conv(LowerCtx *c, const PlanConv *cv) {
  if (capturing(c)) return 0;
  Plan *p = c->pb->p;
  if (GROW(p->convs, p->nconvs, c->pb->cap_convs)) return gpuc_err_set(c->err, "out of memory");
  p->convs[p->nconvs] = *cv;
  PlanStep s = {.kind = PLAN_STEP_CONV, .index = p->nconvs++};
  /* every tensor the call touches is an argument, for liveness */
  uint32_t args[5] = {cv->x, cv->w, cv->y}, n = 3;
  if (cv->b != UINT32_MAX) args[n++] = cv->b;
  if (cv->z != UINT32_MAX) args[n++] = cv->z;
  return add_step(c, &s, NULL, (int)n, args);
}

unsigned cg_fault_step(LowerCtx *c) {
  PlanBuilder *pb = c->pb;
  if (!pb->fault_emitted) {
    sb_printf(&pb->src, "%s", gpuc_fault_cuda_src);
    pb->fault_emitted = true;
  }
  return pb->p->nsteps;
}

void cg_mark_tensor_math(LowerCtx *c) {
  Plan *p = c->pb->p;
  if (c->capture || p->ntune == 0 || p->steps[p->ntune - 1].kind != PLAN_STEP_KERNEL) return;
  p->tune[p->ntune - 1].flags |= PLAN_TUNE_F_TENSOR_MATH;
}

int cg_tensor_map(LowerCtx *c, uint32_t tensor, uint64_t row_bytes, uint64_t rows, uint64_t row_stride,
                  unsigned box_bytes, unsigned box_rows) {
  if (capturing(c)) return 0;
  Plan *p = c->pb->p;
  GPUC_ASSERT(p->nsteps > 0 && p->steps[p->nsteps - 1].kind == PLAN_STEP_KERNEL);
  if (GROW(p->tmaps, p->ntmaps, c->pb->cap_tmaps)) return gpuc_err_set(c->err, "out of memory");
  p->tmaps[p->ntmaps++] = (PlanTensorMap){.step = p->nsteps - 1, .tensor = tensor, .dims = {row_bytes, rows},
                                          .row_stride = row_stride, .box = {box_bytes, box_rows},
                                          .swizzle = PLAN_TMAP_SWIZZLE_128B};
  return 0;
}

void cg_mark_arch_specific(LowerCtx *c) {
  if (!c->capture) c->pb->arch_specific = true;
}

void cg_in_place(LowerCtx *c, uint32_t in, uint32_t out) {
  PlanBuilder *pb = c->pb;
  if (c->capture || pb->p->nsteps == 0 || in == UINT32_MAX || out == UINT32_MAX) return;
  if (GROW(pb->inplace, pb->ninplace, pb->cap_inplace)) { pb->oom = true; return; }
  pb->inplace[pb->ninplace++] = (InPlaceHint){.step = pb->p->nsteps - 1, .in = in, .out = out};
}

/* ---- memory planning ---- */
typedef struct { uint32_t t; int64_t first, last; uint64_t bytes, off; } Live;

static int cmp_live(const void *a, const void *b) {
  const Live *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->t < y->t ? -1 : 1;
}

/* The most bytes simultaneously live at any step: no placement can use
 * less arena than this. Sweep over [first, last] intervals. */
static uint64_t live_lower_bound(const Live *lv, uint32_t n, int64_t nsteps) {
  int64_t span = nsteps + 3; /* steps -1 .. nsteps, and one past */
  int64_t *delta = calloc((size_t)span, sizeof *delta);
  if (!delta) return 0;
  for (uint32_t i = 0; i < n; i++) {
    delta[lv[i].first + 1] += (int64_t)lv[i].bytes;
    delta[lv[i].last + 2] -= (int64_t)lv[i].bytes;
  }
  int64_t cur = 0, best = 0;
  for (int64_t s = 0; s < span; s++) {
    cur += delta[s];
    if (cur > best) best = cur;
  }
  free(delta);
  return (uint64_t)best;
}

/* In-place sharing: out takes in's bytes when in's last use and out's
 * first are the hinted step, both are arena tensors of one size, in is not
 * a graph input (the runtime keeps those intact), and the step reads in
 * through one argument only. Chains (a -> relu -> add) share one slot;
 * owner[t] is the chain's first tensor, chain_last its last step. */
static uint32_t chain_root(const uint32_t *owner, uint32_t t) {
  while (owner[t] != t) t = owner[t];
  return t;
}

static uint32_t share_in_place(PlanBuilder *pb, const int64_t *first, int64_t *chain_last, uint32_t *owner) {
  Plan *p = pb->p;
  uint32_t shared = 0;
  bool *taken = calloc(p->ntensors + 1, sizeof *taken); /* in already handed its bytes on */
  if (!taken) return 0;
  for (uint32_t h = 0; h < pb->ninplace; h++) {
    const InPlaceHint *hint = &pb->inplace[h];
    uint32_t a = gpuc_plan_base_tensor(p, hint->in), b = gpuc_plan_base_tensor(p, hint->out);
    const PlanTensor *ta = &p->tensors[a], *tb = &p->tensors[b];
    if (a == b || taken[a] || owner[b] != b || ta->mem != PLAN_MEM_ARENA || tb->mem != PLAN_MEM_ARENA) continue;
    if (ta->bytes != tb->bytes || ta->role == PLAN_ROLE_INPUT || ta->role == PLAN_ROLE_INPUT_OUTPUT) continue;
    uint32_t root = chain_root(owner, a);
    if (chain_last[root] != (int64_t)hint->step || first[b] != (int64_t)hint->step) continue;
    const PlanStep *st = &p->steps[hint->step];
    int reads = 0;
    for (uint32_t k = 0; k < st->nargs; k++) reads += gpuc_plan_base_tensor(p, p->args[st->args + k]) == a;
    if (reads != 1) continue;
    owner[b] = root;
    taken[a] = true;
    chain_last[root] = chain_last[b];
    shared++;
  }
  free(taken);
  return shared;
}

/* Greedy by size: biggest first, each at the lowest offset that overlaps no
 * placed tensor whose lifetime overlaps its own. Inputs live from the
 * start, outputs to the end (the runtime copies them in and out). */
static int plan_memory(PlanBuilder *pb) {
  Plan *p = pb->p;
  int64_t *first = malloc(sizeof(int64_t) * (p->ntensors + 1));
  int64_t *last = malloc(sizeof(int64_t) * (p->ntensors + 1));
  uint32_t *owner = malloc(sizeof(uint32_t) * (p->ntensors + 1));
  Live *lv = malloc(sizeof(Live) * (p->ntensors + 1));
  if (!first || !last || !owner || !lv) { free(first); free(last); free(owner); free(lv); return -1; }
  for (uint32_t t = 0; t < p->ntensors; t++) { first[t] = INT64_MAX; last[t] = -1; owner[t] = t; }
  int64_t end = p->nsteps;
  for (uint32_t s = 0; s < p->nsteps; s++)
    for (uint32_t a = 0; a < p->steps[s].nargs; a++) {
      uint32_t t = gpuc_plan_base_tensor(p, p->args[p->steps[s].args + a]);
      if (first[t] > s) first[t] = s;
      if (last[t] < (int64_t)s) last[t] = s;
    }
  for (uint32_t t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    uint32_t b = gpuc_plan_base_tensor(p, t);
    /* inputs live through the whole schedule: a replay without a new
     * upload (gpuc bench, a bound C API input, a second run) must read the
     * same bytes, so nothing may reuse them after their last read */
    if (pt->role == PLAN_ROLE_INPUT || pt->role == PLAN_ROLE_INPUT_OUTPUT) { first[b] = -1; last[b] = end; }
    if (pt->role == PLAN_ROLE_OUTPUT) last[b] = end;
    /* an output no step touches (an empty Split part, found by fuzz_onnx):
     * it lives at the end only, not from "step INT64_MAX" */
    if (first[b] == INT64_MAX && last[b] >= 0) first[b] = last[b];
  }
  pb->inplace_shared = share_in_place(pb, first, last, owner);
  uint32_t n = 0;
  uint64_t naive = 0;
  for (uint32_t t = 0; t < p->ntensors; t++) {
    if (p->tensors[t].mem != PLAN_MEM_ARENA || last[t] < 0) continue;
    uint64_t bytes = (p->tensors[t].bytes + GPUC_PLAN_ALIGN - 1) & ~(uint64_t)(GPUC_PLAN_ALIGN - 1);
    naive += bytes; /* every tensor its own bytes: no reuse at all */
    if (owner[t] != t) continue; /* placed with its chain's first tensor */
    lv[n++] = (Live){.t = t, .first = first[t], .last = last[t], .bytes = bytes ? bytes : GPUC_PLAN_ALIGN};
  }
  pb->lower_bound = live_lower_bound(lv, n, end);
  qsort(lv, n, sizeof *lv, cmp_live);
  uint64_t arena = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t off = 0;
    bool moved = true;
    while (moved) { /* bump past every conflicting placed tensor */
      moved = false;
      for (uint32_t j = 0; j < i; j++) {
        if (lv[j].last < lv[i].first || lv[i].last < lv[j].first) continue;
        if (off < lv[j].off + lv[j].bytes && lv[j].off < off + lv[i].bytes) {
          off = lv[j].off + lv[j].bytes;
          moved = true;
        }
      }
    }
    lv[i].off = off;
    p->tensors[lv[i].t].offset = off;
    if (off + lv[i].bytes > arena) arena = off + lv[i].bytes;
  }
  for (uint32_t t = 0; t < p->ntensors; t++)
    if (owner[t] != t) p->tensors[t].offset = p->tensors[chain_root(owner, t)].offset;
  p->meta.arena_bytes = arena;
  p->meta.naive_bytes = naive;
  free(first); free(last); free(owner); free(lv);
  return 0;
}

/* The library calls' scratch known at compile time: 8 MiB for cuBLASLt
 * (BERT-base and ResNet-50 ran as fast on the H200 with 8 MiB as with
 * its recommended 32). cuDNN's needs are known only with the GPU: the
 * runtime grows the workspace to what the chosen algorithms need (each at
 * most 1 GiB). A smaller cap cost speed: ResNet-50 fp16 b256 took 6.90 ms
 * with its stem's 514 MB algorithm and 9.45 ms within 205 MB. */
enum { GEMM_WORKSPACE_BYTES = 8 << 20 };

/* ---- the prelude every module starts with ---- */
static const char *prelude =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "typedef long long i64;\n"
    "/* load any element type as float / store float into any type */\n"
    "template <class T> __device__ __forceinline__ float ldf(T x) { return (float)x; }\n"
    "__device__ __forceinline__ float ldf(__half x) { return __half2float(x); }\n"
    "__device__ __forceinline__ float ldf(__nv_bfloat16 x) { return __bfloat162float(x); }\n"
    "template <class T> __device__ __forceinline__ T stf(float x) { return (T)x; }\n"
    "template <> __device__ __forceinline__ __half stf<__half>(float x) { return __float2half_rn(x); }\n"
    "template <> __device__ __forceinline__ __nv_bfloat16 stf<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }\n"
    "template <> __device__ __forceinline__ unsigned char stf<unsigned char>(float x) { return (unsigned char)(int)x; }\n"
    "/* V elements of T moved as one aligned vector access */\n"
    "template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };\n"
    "#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \\\n"
    "                               i += (i64)gridDim.x * blockDim.x)\n";

/* ---- the driver ---- */
uint32_t cg_value_tensor(PlanBuilder *pb, int v) { return value_tensor(pb, v); }
GpucErr *cg_builder_err(PlanBuilder *pb) { return pb->e; }
Plan *cg_builder_plan(PlanBuilder *pb) { return pb->p; }
const CodegenOptions *cg_builder_opt(PlanBuilder *pb) { return pb->opt; }

static int lower_node(PlanBuilder *pb, int i, struct EwCapture *cap, const RowFuse *row, const char *label);
int cg_lower_node(PlanBuilder *pb, int i, struct EwCapture *cap, const char *label) {
  return lower_node(pb, i, cap, NULL, label);
}
int cg_lower_node_row(PlanBuilder *pb, int i, const RowFuse *row, const char *label) {
  return lower_node(pb, i, NULL, row, label);
}

static int lower_node(PlanBuilder *pb, int i, struct EwCapture *cap, const RowFuse *row, const char *label) {
  const Graph *g = pb->g;
  const Node *n = &g->nodes[i];
  const Tensor *ins[GPUC_MAX_IO], *outs[GPUC_MAX_IO];
  uint32_t tin[GPUC_MAX_IO], tout[GPUC_MAX_IO];
  LowerCtx c = {.g = g, .n = n, .node_index = i, .nin = n->nin, .nout = n->nout, .in = ins,
                .out = outs, .tin = tin, .tout = tout, .pb = pb, .opt = pb->opt, .err = pb->e,
                .capture = cap, .label = label, .src_start = pb->src.len, .row = row};
  snprintf(c.kname, sizeof c.kname, "k%d_%s", i, gpuc_op_name(n));
  for (int k = 0; k < n->nin; k++) {
    int v = n->in[k];
    ins[k] = v >= 0 ? &g->values[v].t : NULL;
    /* while capturing, values of the node's own group stay in registers */
    bool internal = cap && v >= 0 && g->values[v].producer >= 0 &&
                    g->nodes[g->values[v].producer].fuse_group == n->fuse_group;
    internal |= row && row->dq >= 0 && k == 0; /* X is dequantized as it is loaded: never stored */
    internal |= cap && v >= 0 && g->values[v].producer >= 0 && pb->in_epilogue && pb->in_epilogue[g->values[v].producer];
    tin[k] = v >= 0 && !internal ? value_tensor(pb, v) : UINT32_MAX;
  }
  for (int k = 0; k < n->nout; k++) {
    outs[k] = n->out[k] >= 0 ? &g->values[n->out[k]].t : NULL;
    bool dropped = row && row->drop_y && k == 0; /* quantized in the same kernel, read by nothing else */
    tout[k] = n->out[k] >= 0 && !cap && !dropped ? value_tensor(pb, n->out[k]) : UINT32_MAX;
  }
  if (pb->oom) return gpuc_err_set(pb->e, "%s: out of memory", g->path);
  int rc = lower_fns[n->op](&c);
  return rc || cap ? rc : cg_cost_steps(pb->p, &c);
}

/* Group m[0..nm) (one ungrouped node when nm is 1), preceded by the int8
 * GEMM whose epilogue it is when there is one: one kernel, or, when the
 * group does not inline, the GEMM writing int32 and the group after it. */
static int lower_with_epilogue(PlanBuilder *pb, const int *m, int nm, const int *reader_group) {
  int mm = -1;
  for (int t = 0; t < nm && mm < 0; t++) mm = pb->epilogue_of[m[t]];
  if (mm >= 0) {
    int rc = cg_lower_int8_epilogue(pb, pb->g, mm, m, nm);
    if (rc <= 0) return rc;
    pb->in_epilogue[mm] = false; /* its sums are a tensor after all */
    if (cg_lower_node(pb, mm, NULL, NULL)) return -1;
  }
  return nm > 1 ? cg_lower_group(pb, pb->g, m, nm, reader_group) : cg_lower_node(pb, m[0], NULL, NULL);
}

int gpuc_codegen(const Graph *g, const CodegenOptions *o, Plan **out, CompileStats *st,
                 GpucErr *e) {
  *out = NULL;
  int *members = NULL;
  PlanBuilder pb = {.g = g, .opt = o, .e = e};
  pb.p = calloc(1, sizeof *pb.p);
  pb.value_tensor = malloc(sizeof(uint32_t) * ((size_t)g->nvalues + 1));
  int rc = -1;
  if (!pb.p || !pb.value_tensor) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  for (int v = 0; v < g->nvalues; v++) pb.value_tensor[v] = UINT32_MAX;
  add_string(&pb, "");
  sb_printf(&pb.src, "%s", prelude);
  if (gpuc_graph_check_sizes(g, e)) goto done; /* a graph that did not pass gpuc_passes_run (training) */
  /* every shape static: name the first value (in node order) that is not */
  int unknown = -1;
  for (int v = 0; v < g->nvalues; v++) {
    const Value *val = &g->values[v];
    bool used = val->is_input || val->is_output || val->producer >= 0;
    if (!used || (gpuc_shape_known(&val->t) && val->t.dt != GPUC_DT_UNDEF)) continue;
    if (unknown < 0 || val->producer < g->values[unknown].producer) unknown = v;
  }
  if (unknown >= 0) {
    char why[900];
    gpuc_explain_unknown_shape(g, unknown, why, sizeof why);
    gpuc_err_set(e, "%s: %s", g->path, why);
    goto done;
  }
  /* inputs and outputs first, in order, so the runtime finds them by role */
  for (int k = 0; k < g->ninputs; k++) value_tensor(&pb, g->inputs[k]);
  for (int k = 0; k < g->noutputs; k++)
    if (!g->values[g->outputs[k]].is_const) value_tensor(&pb, g->outputs[k]);
  /* fusion groups (ids 1..nnodes): members chained in node order */
  size_t nn1 = (size_t)g->nnodes + 1;
  members = malloc(sizeof(int) * (nn1 * 4 + (size_t)g->nvalues + 1));
  if (!members) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  int *first = members + nn1, *last = first + nn1, *next = last + nn1, *reader_group = next + nn1;
  for (size_t k = 0; k < nn1; k++) first[k] = last[k] = next[k] = -1;
  cg_reader_groups(g, reader_group);
  for (int i = 0; i < g->nnodes; i++) {
    int grp = g->nodes[i].fuse_group;
    if (grp <= 0 || grp > g->nnodes) continue;
    if (first[grp] < 0) first[grp] = i;
    else next[last[grp]] = i;
    last[grp] = i;
  }
  /* int8 GEMMs with their DequantizeRows group as the epilogue: lowered
   * where that group (or the lone DequantizeRows) stands, after every
   * input of both is made */
  pb.in_epilogue = calloc(nn1, sizeof *pb.in_epilogue);
  pb.epilogue_of = malloc(sizeof(int) * nn1);
  if (!pb.in_epilogue || !pb.epilogue_of) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  for (size_t k = 0; k < nn1; k++) pb.epilogue_of[k] = -1;
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].op != GPUC_OP_MATMULINT8) continue;
    int d = cg_int8_epilogue_reader(g, o, i, reader_group);
    if (d < 0) continue;
    pb.in_epilogue[i] = true;
    pb.epilogue_of[d] = i;
  }
  for (int i = 0; i < g->nnodes; i++) {
    if (pb.in_epilogue[i]) continue; /* made with its reader */
    int grp = g->nodes[i].fuse_group;
    if (grp <= 0 || grp > g->nnodes) {
      if (lower_with_epilogue(&pb, &i, 1, reader_group)) goto done;
      continue;
    }
    if (i != last[grp]) continue; /* a group is lowered where its last member stands */
    int nm = 0;
    for (int j = first[grp]; j >= 0; j = next[j]) members[nm++] = j;
    if (lower_with_epilogue(&pb, members, nm, reader_group)) goto done;
  }
  /* graph outputs that are constants (folded) get an arena buffer filled
   * from the weights by a copy step */
  for (int k = 0; k < g->noutputs; k++) {
    int v = g->outputs[k];
    if (!g->values[v].is_const) continue;
    Node dummy = {.name = g->values[v].name};
    LowerCtx c = {.g = g, .n = &dummy, .pb = &pb, .opt = o, .err = e};
    snprintf(c.kname, sizeof c.kname, "k_const_output%d", k);
    uint32_t w = value_tensor(&pb, v);
    uint32_t t = new_tensor(&pb, g->values[v].name, &g->values[v].t, PLAN_MEM_ARENA, PLAN_ROLE_OUTPUT);
    if (w == UINT32_MAX || t == UINT32_MAX) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
    pb.p->tensors[w].role = PLAN_ROLE_CONST;
    if (gpuc_tensor_bytes(&g->values[v].t) && cg_copy(&c, w, t, gpuc_tensor_bytes(&g->values[v].t))) goto done;
    if (cg_cost_steps(pb.p, &c)) goto done;
  }
  if (pb.oom || pb.src.oom || pb.strings.oom) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  if (plan_memory(&pb)) { gpuc_err_set(e, "%s: out of memory", g->path); goto done; }
  Plan *p = pb.p;
  GPUC_ASSERT(p->ncosts == p->nsteps);
  p->meta.weight_bytes = p->weights_size;
  p->meta.workspace_bytes = GEMM_WORKSPACE_BYTES;
  p->meta.ninputs = (uint32_t)g->ninputs;
  p->meta.noutputs = (uint32_t)g->noutputs;
  p->meta.nnodes_lowered = (uint32_t)g->nnodes;
  p->meta.batch = g->ninputs && g->values[g->inputs[0]].t.rank > 0 ? g->values[g->inputs[0]].t.dims[0] : 1;
  p->hdr.sm = (uint32_t)o->sm;
  p->hdr.flags = (o->fp16 ? GPUC_PLAN_F_FP16 : 0) | (o->bf16 ? GPUC_PLAN_F_BF16 : 0) |
                 (pb.arch_specific ? GPUC_PLAN_F_ARCH_SPECIFIC : 0);
  if (o->mem_limit > 0 && p->meta.arena_bytes + p->meta.workspace_bytes + p->weights_size > (uint64_t)o->mem_limit) {
    gpuc_err_set(e, "%s: the plan needs %llu bytes of device memory (arena %llu + workspace %llu + "
                 "weights %llu), over --mem-limit %lld", g->path,
                 (unsigned long long)(p->meta.arena_bytes + p->meta.workspace_bytes + p->weights_size),
                 (unsigned long long)p->meta.arena_bytes, (unsigned long long)p->meta.workspace_bytes,
                 (unsigned long long)p->weights_size, (long long)o->mem_limit);
    goto done;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t ptx_size = 0, cubin_size = 0;
  /* GPUC_SAVE_SOURCE=FILE: the module's CUDA C as NVRTC gets it, for
   * reading and for tests that run a generated kernel's text on the host
   * (tests/dwconv_host_test.py) */
  const char *save = getenv("GPUC_SAVE_SOURCE");
  if (save && *save) {
    FILE *f = fopen(save, "w");
    bool ok = f && fwrite(pb.src.s, 1, pb.src.len, f) == pb.src.len;
    if (f && fclose(f)) ok = false;
    if (!ok) { gpuc_err_set(e, "GPUC_SAVE_SOURCE: cannot write %s", save); goto done; }
  }
  if (!o->skip_nvrtc && gpuc_nvrtc_compile(pb.src.s, o->sm, pb.arch_specific, &p->ptx, &ptx_size, &p->cubin, &cubin_size, e)) goto done;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  p->ptx_size = ptx_size;
  p->cubin_size = cubin_size;
  p->strings = pb.strings.s;
  p->strings_size = pb.strings.len;
  pb.strings.s = NULL;
  if (st) {
    st->nodes_after = g->nnodes;
    st->kernels = (int)p->nkernels;
    st->gemms = (int)p->ngemms;
    st->gemms_24 = 0;
    for (uint32_t i = 0; i < p->ngemms; i++) st->gemms_24 += (p->gemms[i].flags & PLAN_GEMM_F_SPARSE24) != 0;
    st->convs = (int)p->nconvs;
    st->arena_bytes = p->meta.arena_bytes;
    st->naive_bytes = p->meta.naive_bytes;
    st->lower_bound_bytes = pb.lower_bound;
    st->inplace_tensors = pb.inplace_shared;
    st->weight_bytes = p->weights_size;
    st->workspace_bytes = p->meta.workspace_bytes;
    st->nvrtc_seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  }
  *out = p;
  pb.p = NULL;
  rc = 0;
done:
  free(members);
  free(pb.in_epilogue);
  free(pb.epilogue_of);
  gpuc_plan_free(pb.p);
  free(pb.value_tensor);
  free(pb.inplace);
  free(pb.strings.s);
  free(pb.src.s);
  return rc;
}
