/* The GPU executor of gpuc train.
 *
 * The training graph (forward + loss + backward, batch bound) is compiled
 * to a plan like any model (codegen, NVRTC, cuDNN/cuBLASLt steps) and run
 * by a GpucSession, replayed as one CUDA graph per micro-batch. Around it,
 * on the same stream:
 *   - the batch: assembled on the host in pinned memory, copied on a second
 *     stream into a device staging buffer while the previous micro-batch
 *     computes, then moved into the plan's input tensors (device to device);
 *   - the parameters: updated in place in the plan's weights by one
 *     multi-tensor optimizer kernel (optim_kernels.c); with --amp the plan
 *     reads half copies and the fp32 master weights live beside it;
 *   - BatchNormalization running statistics: the plan outputs them; they
 *     are copied onto the initializers the next micro-batch reads;
 *   - training-mode Dropout's counter (train/dropout.c): 16 bytes after
 *     the labels in the pinned and staging buffers, moved into the plan's
 *     counter input with them, so each replay draws that step's masks;
 *   - --amp bf16: the same half copies in bfloat16, and no loss scale (bf16
 *     has fp32's range: gradients neither underflow nor overflow where
 *     fp32's would not), so no skipped steps;
 *   - the loss scale (--amp): device scalars, written into the backward's
 *     seed (d loss / d loss) before each micro-batch; the non-finite check,
 *     the skip and the scale update are kernels, so no step waits for the
 *     host.
 * The host copies of parameters and optimizer state (Trainer) are brought
 * up to date at epoch ends (gpu_end_epoch), so evaluation, checkpoints and
 * --save work on them unchanged. Test accuracy runs a second plan: the
 * model alone in inference mode, fp32, at the training batch (so it needs
 * no more activation memory than a training step). */
#include "train_internal.h"
#include "train_gpu_src.h"
#include "codegen.h"
#include "cuda_api.h"
#include "frontend.h"
#include "passes.h"
#include "session.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AMP_INITIAL_SCALE 65536.0f

struct TrainGpu {
  GpucSession *s, *ev;
  bool amp;                       /* fp16 AMP: the dynamic loss scale and skipped steps */
  GpucDType half;                 /* the half copies' dtype (F16, BF16), or UNDEF without --amp */
  CUmodule mod;
  CUfunction f_acc, f_check, f_sgd, f_adamw, f_scale, f_loss, f_seed;
  CUstream main, copy;
  CUevent copied[2], consumed[2];
  void *hx[2], *hy[2];            /* pinned host batches */
  CUdeviceptr dx[2], dy[2];       /* device staging */
  int cur;
  size_t xbytes, ybytes, cbytes;  /* cbytes: the Dropout counter after the labels, or 0 */
  CUdeviceptr x, y, loss, seed, counter; /* plan tensors */
  /* updated tensors */
  int nt;
  OptTensor *tab;
  int *tab_param;                 /* parameter index of each entry */
  CUdeviceptr d_tab, d_ct, d_co;
  unsigned nchunks;
  CUdeviceptr *own;               /* device buffers allocated here (freed at the end) */
  int nown, capown;
  CUdeviceptr sc;                 /* SC_COUNT floats */
  int use_acc;                    /* accum > 1 */
  float gmul;
  /* running statistics: plan output -> initializer */
  CUdeviceptr *bn_src, *bn_dst;
  size_t *bn_bytes;
  bool eval_stale;                /* host parameters newer than the eval plan's */
};

#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) return gpuc_cu_fail(e, r_, #call, __FILE__, __LINE__); } while (0)

static int dev_alloc(TrainGpu *G, CUdeviceptr *p, size_t bytes, GpucErr *e) {
  if (G->nown == G->capown) {
    int cap = G->capown ? G->capown * 2 : 64;
    CUdeviceptr *o = realloc(G->own, sizeof *o * (size_t)cap);
    if (!o) return gpuc_err_set(e, "out of memory");
    G->own = o;
    G->capown = cap;
  }
  CU(cu.cuMemAlloc(p, bytes ? bytes : 4));
  G->own[G->nown++] = *p;
  return 0;
}

void gpu_free(TrainGpu *G) {
  if (!G) return;
  if (G->main) cu.cuStreamSynchronize(G->main);
  if (G->copy) { cu.cuStreamSynchronize(G->copy); cu.cuStreamDestroy(G->copy); }
  for (int j = 0; j < 2; j++) {
    if (G->copied[j]) cu.cuEventDestroy(G->copied[j]);
    if (G->consumed[j]) cu.cuEventDestroy(G->consumed[j]);
    if (G->hx[j]) cu.cuMemFreeHost(G->hx[j]);
    if (G->hy[j]) cu.cuMemFreeHost(G->hy[j]);
  }
  for (int i = 0; i < G->nown; i++) cu.cuMemFree(G->own[i]);
  if (G->mod) cu.cuModuleUnload(G->mod);
  gpuc_session_free(G->ev);
  gpuc_session_free(G->s);
  free(G->own); free(G->tab); free(G->tab_param);
  free(G->bn_src); free(G->bn_dst); free(G->bn_bytes);
  free(G);
}

/* Device address of the plan tensor named `name` with dtype dt, 0 if none. */
static CUdeviceptr tensor_ptr(GpucSession *s, const char *name, GpucDType dt) {
  int i = gpuc_session_tensor(s, name);
  if (i < 0 || gpuc_session_plan(s)->tensors[i].dt != dt) return 0;
  return gpuc_session_tensor_ptr(s, (uint32_t)i);
}

/* The half twin passes/fp16.c gives a converted constant: "<name>.<dtype>". */
static CUdeviceptr half_twin(const TrainGpu *G, const char *name) {
  if (G->half == GPUC_DT_UNDEF) return 0;
  char n16[1100];
  snprintf(n16, sizeof n16, "%s.%s", name, gpuc_dtype_name(G->half));
  return tensor_ptr(G->s, n16, G->half);
}

static Plan *compile_plan(const Graph *g, int sm, GpucDType half, const char *what, FILE *log, GpucErr *e) {
  CodegenOptions co = {.sm = sm, .fp16 = half == GPUC_DT_F16, .bf16 = half == GPUC_DT_BF16, .level = 0};
  CompileStats st = {0};
  Plan *p = NULL;
  if (gpuc_codegen(g, &co, &p, &st, e)) return NULL;
  /* the trainer rewrites these plans' weights; a GEMM on sparse tensor
   * cores would keep computing with the copy compressed at load */
  for (uint32_t i = 0; i < p->ngemms; i++) p->gemms[i].flags &= ~(uint32_t)PLAN_GEMM_F_SPARSE24;
  if (log)
    fprintf(log, "%s plan: %d kernels, %d GEMMs, %d convolutions, arena %.1f MB, weights %.1f MB, "
            "NVRTC %.2f s\n", what, st.kernels, st.gemms, st.convs, (double)st.arena_bytes / 1e6,
            (double)st.weight_bytes / 1e6, st.nvrtc_seconds);
  return p;
}

static uint64_t plan_bytes(const Plan *p) {
  return p->meta.arena_bytes + p->weights_size + p->meta.workspace_bytes;
}

/* Device bytes of a step beside the plans: optimizer state, --accum sums,
 * fp32 masters of parameters the plan keeps only in half, the staging
 * batches. */
static uint64_t trainer_bytes(const Trainer *t, const Plan *p, const TrainGpuOptions *o) {
  uint64_t b = 2 * (sizeof(float) + sizeof(int64_t)) * (uint64_t)t->batch * (uint64_t)t->dim;
  for (int i = 0; i < t->np; i++) {
    const Value *v = &t->g->values[t->param[i]];
    uint64_t n = (uint64_t)gpuc_numel(&v->t) * sizeof(float);
    b += n * (o->adamw ? 2 : 1) + (o->accum > 1 ? n : 0) + (o->prune ? n : 0);
    bool f32 = false;
    for (uint32_t k = 0; k < p->ntensors && !f32; k++)
      f32 = p->tensors[k].dt == GPUC_DT_F32 && !strcmp(gpuc_plan_str(p, p->tensors[k].name), v->name);
    if (!f32) b += n;
  }
  return b;
}

static int load_kernels(TrainGpu *G, int sm, GpucErr *e) {
  char *ptx = NULL;
  size_t ptx_size = 0;
  if (gpuc_nvrtc_compile(gpuc_optim_kernels_src(G->half == GPUC_DT_BF16), sm, false, &ptx, &ptx_size, NULL, NULL, e)) {
    gpuc_err_prefix(e, "the GPU trainer's optimizer kernels");
    return -1;
  }
  CUresult r = cu.cuModuleLoadDataEx(&G->mod, ptx, 0, NULL, NULL);
  free(ptx);
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuModuleLoadDataEx", __FILE__, __LINE__);
  const struct { CUfunction *f; const char *name; } fns[] = {
    {&G->f_acc, "gpuc_grad_acc"}, {&G->f_check, "gpuc_grad_check"}, {&G->f_sgd, "gpuc_sgd"},
    {&G->f_adamw, "gpuc_adamw"}, {&G->f_scale, "gpuc_scale_update"}, {&G->f_loss, "gpuc_loss_acc"},
    {&G->f_seed, "gpuc_seed"},
  };
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) CU(cu.cuModuleGetFunction(fns[i].f, G->mod, fns[i].name));
  return 0;
}

/* The seed of the backward (the constant d loss / d loss the loss gradient
 * reads): with --amp the loss scale is written there. */
static const char *seed_name(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_SOFTMAXCROSSENTROPYLOSSGRAD) return g->values[g->nodes[i].in[0]].name;
  return NULL;
}

int gpuc_trainer_use_gpu(Trainer *t, const TrainGpuOptions *o, FILE *log, GpucErr *e) {
  int sm = o->sm;
  if (sm <= 0 && (sm = gpuc_gpu_sm(e)) < 0) return -1;
  bool amp = o->amp && !o->bf16; /* loss-scaled */
  GpucDType half = !o->amp ? GPUC_DT_UNDEF : o->bf16 ? GPUC_DT_BF16 : GPUC_DT_F16;
  Graph *g = t->g;
  const char *seed = seed_name(g);
  if (!seed) return gpuc_err_set(e, "%s: the training graph has no loss gradient", g->path);
  if (half != GPUC_DT_UNDEF) {
    /* half storage with fp32 islands, as inference --fp16 / --bf16; the
     * parameters' own values stay (fp32, the host copies), their half
     * twins are new */
    PassOptions po;
    gpuc_pass_options_default(&po, 0);
    po.fp16 = half == GPUC_DT_F16;
    po.bf16 = half == GPUC_DT_BF16;
    if (pass_fp16(g, &po, e) < 0 || gpuc_graph_verify(g, e))
      return gpuc_err_prefix(e, o->bf16 ? "--amp bf16" : "--amp"), -1;
  }
  if (o->level >= 2) { /* elementwise chains of the backward (Relu's Greater-Where...) into one kernel */
    PassOptions po;
    gpuc_pass_options_default(&po, 2);
    po.training = true;
    if (pass_fuse_elementwise(g, &po, e) < 0 || gpuc_graph_verify(g, e)) return -1;
  }
  Plan *tp = compile_plan(g, sm, half, amp ? "training (amp)" : o->amp ? "training (amp bf16)" : "training", log, e),
       *ep = NULL;
  if (!tp) return -1;
  {
    GpucShapeBind b = {.name = t->eval->values[t->eval->inputs[0]].name, .rank = t->in_rank};
    memcpy(b.dims, t->in_dims, sizeof b.dims);
    b.dims[0] = t->batch;
    /* the batch as the trainer binds it: an exporter's fixed batch (often
     * 1) made symbolic first */
    Graph *eg = gpuc_onnx_load(g->path, NULL, 0, e);
    bool ok = eg != NULL;
    if (ok) {
      eg->values[eg->inputs[0]].t.dims[0] = -1;
      ok = !gpuc_dropout_eval_mode(eg, e) && !gpuc_graph_infer(eg, e) &&
           !gpuc_graph_bind_shape(eg, b.name, b.rank, b.dims, e) && !gpuc_graph_infer(eg, e);
    }
    if (ok) ep = compile_plan(eg, sm, GPUC_DT_UNDEF, "evaluation", log, e);
    gpuc_graph_free(eg);
    if (!ep) { gpuc_plan_free(tp); return -1; }
  }
  uint64_t need_plan = plan_bytes(tp), need_eval = plan_bytes(ep), need_opt = trainer_bytes(t, tp, o);
  uint64_t need = need_plan + need_eval + need_opt;
  if (log)
    fprintf(log, "device memory: %.1f MB (training plan %.1f, evaluation plan %.1f, optimizer state, "
            "masters and batches %.1f)\n", (double)need / 1e6, (double)need_plan / 1e6,
            (double)need_eval / 1e6, (double)need_opt / 1e6);
  if (o->mem_limit > 0 && need > (uint64_t)o->mem_limit) {
    /* smaller micro-batches shrink the activations and the batches only */
    uint64_t fixed = need - tp->meta.arena_bytes - 2 * (sizeof(float) + sizeof(int64_t)) * (uint64_t)t->batch * (uint64_t)t->dim;
    bool hopeless = fixed >= (uint64_t)o->mem_limit;
    gpuc_err_set(e, "%s: a training step of batch %lld needs %llu bytes of device memory (training plan "
                 "%llu: arena %llu, weights %llu, workspace %llu; evaluation plan %llu; optimizer state, "
                 "masters and batches %llu), --mem-limit allows %lld", g->path, (long long)t->batch,
                 (unsigned long long)need, (unsigned long long)need_plan,
                 (unsigned long long)tp->meta.arena_bytes, (unsigned long long)tp->weights_size,
                 (unsigned long long)tp->meta.workspace_bytes, (unsigned long long)need_eval,
                 (unsigned long long)need_opt, (long long)o->mem_limit);
    gpuc_plan_free(tp);
    gpuc_plan_free(ep);
    if (!hopeless) return GPUC_TRAIN_TOO_BIG;
    char why[200];
    snprintf(why, sizeof why, "; without activations it still needs %llu bytes, so smaller micro-batches cannot fit",
             (unsigned long long)fixed);
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, "%s", why);
    return -1;
  }
  TrainGpu *G = calloc(1, sizeof *G);
  if (!G) { gpuc_plan_free(tp); gpuc_plan_free(ep); return gpuc_err_set(e, "out of memory"); }
  G->amp = amp;
  G->half = half;
  G->s = gpuc_session_create_plan(tp, "the training plan", 0, e);
  G->ev = G->s ? gpuc_session_create_plan(ep, "the evaluation plan", 0, e) : (gpuc_plan_free(ep), NULL);
  if (!G->s || !G->ev) goto fail;
  if (load_kernels(G, sm, e)) goto fail;
  G->main = (CUstream)gpuc_session_stream(G->s);
  G->xbytes = sizeof(float) * (size_t)(t->batch * t->dim);
  G->ybytes = sizeof(int64_t) * (size_t)t->batch;
  G->cbytes = t->counter ? 2 * sizeof(int64_t) : 0;
#define TRYF(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { gpuc_cu_fail(e, r_, #call, __FILE__, __LINE__); goto fail; } } while (0)
  TRYF(cu.cuStreamCreate(&G->copy, CU_STREAM_NON_BLOCKING));
  for (int j = 0; j < 2; j++) {
    TRYF(cu.cuEventCreate(&G->copied[j], CU_EVENT_DISABLE_TIMING));
    TRYF(cu.cuEventCreate(&G->consumed[j], CU_EVENT_DISABLE_TIMING));
    TRYF(cu.cuMemHostAlloc(&G->hx[j], G->xbytes, 0));
    TRYF(cu.cuMemHostAlloc(&G->hy[j], G->ybytes + G->cbytes, 0));
    if (dev_alloc(G, &G->dx[j], G->xbytes, e) || dev_alloc(G, &G->dy[j], G->ybytes + G->cbytes, e)) goto fail;
  }
  if (dev_alloc(G, &G->sc, sizeof(float) * SC_COUNT, e)) goto fail;
#undef TRYF
  G->x = tensor_ptr(G->s, g->values[g->inputs[0]].name, GPUC_DT_F32);
  G->y = tensor_ptr(G->s, g->values[g->inputs[1]].name, GPUC_DT_I64);
  G->loss = tensor_ptr(G->s, g->values[g->outputs[0]].name, GPUC_DT_F32);
  G->seed = tensor_ptr(G->s, seed, GPUC_DT_F32);
  if (t->counter) G->counter = tensor_ptr(G->s, g->values[g->inputs[2]].name, GPUC_DT_I64);
  if (!G->x || !G->y || !G->loss || (amp && !G->seed) || (t->counter && !G->counter)) {
    gpuc_err_set(e, "%s: the training plan lacks its images, labels, loss, loss seed or Dropout counter tensor",
                 g->path);
    goto fail;
  }
  /* running statistics: output np+1+j -> initializer param[np+j] */
  G->bn_src = calloc((size_t)t->nbuf + 1, sizeof(CUdeviceptr));
  G->bn_dst = calloc((size_t)t->nbuf + 1, sizeof(CUdeviceptr));
  G->bn_bytes = calloc((size_t)t->nbuf + 1, sizeof(size_t));
  if (!G->bn_src || !G->bn_dst || !G->bn_bytes) { gpuc_err_set(e, "out of memory"); goto fail; }
  for (int j = 0; j < t->nbuf; j++) {
    const Value *w = &g->values[t->param[t->np + j]];
    G->bn_src[j] = tensor_ptr(G->s, g->values[g->outputs[1 + t->np + j]].name, GPUC_DT_F32);
    G->bn_dst[j] = tensor_ptr(G->s, w->name, GPUC_DT_F32);
    G->bn_bytes[j] = gpuc_tensor_bytes(&w->t);
    if (!G->bn_src[j] || !G->bn_dst[j]) {
      gpuc_err_set(e, "%s: running statistics '%s' are not fp32 tensors of the plan", g->path, w->name);
      goto fail;
    }
  }
  t->gpu = G;
  return 0;
fail:
  gpu_free(G);
  return -1;
}

static bool is_frozen(const char *name, const TrainOptions *o) {
  for (int k = 0; k < o->nfreeze; k++)
    if (strstr(name, o->freeze[k])) return true;
  return false;
}

/* host f32 data -> the fp32 location and the half twin (f16 or bf16) of
 * one parameter */
static int upload_param(const float *h, int64_t n, CUdeviceptr p, CUdeviceptr p16, GpucDType half, GpucErr *e) {
  if (p) CU(cu.cuMemcpyHtoD(p, h, sizeof(float) * (size_t)n));
  if (p16) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n + 2);
    if (!b) return gpuc_err_set(e, "out of memory");
    for (int64_t i = 0; i < n; i++) b[i] = half == GPUC_DT_BF16 ? gpuc_f32_to_bf16(h[i]) : gpuc_f32_to_f16(h[i]);
    CUresult r = cu.cuMemcpyHtoD(p16, b, sizeof(uint16_t) * (size_t)n);
    free(b);
    if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuMemcpyHtoD", __FILE__, __LINE__);
  }
  return 0;
}

/* The device scalars at the start of a fit. A resumed --amp run goes on
 * with its scale, its run of clean steps and its skip count (floats: exact
 * to 2^24); AdamW's t counts the applied steps only, as on the device. */
static int upload_scalars(TrainGpu *G, const TrainState *st, GpucErr *e) {
  float sc[SC_COUNT] = {0};
  sc[SC_SCALE] = !G->amp ? 1.0f : st->loss_scale > 0 ? st->loss_scale : AMP_INITIAL_SCALE;
  sc[SC_CLEAN] = G->amp ? (float)st->amp_clean : 0.0f;
  sc[SC_SKIPPED] = (float)st->amp_skipped;
  sc[SC_T] = (float)(st->step - st->amp_skipped);
  CU(cu.cuMemcpyHtoD(G->sc, sc, sizeof sc));
  if (G->seed) CU(cu.cuMemcpyHtoD(G->seed, &sc[SC_SCALE], sizeof(float)));
  return 0;
}

int gpu_amp_state(Trainer *t, TrainState *st, GpucErr *e) {
  TrainGpu *G = t->gpu;
  if (!G->amp) return 0; /* st keeps what a resumed checkpoint had: this run does not change it */
  float sc[SC_COUNT];
  CU(cu.cuStreamSynchronize(G->main));
  CU(cu.cuMemcpyDtoH(sc, G->sc, sizeof sc));
  st->loss_scale = sc[SC_SCALE];
  st->amp_clean = (int64_t)sc[SC_CLEAN];
  st->amp_skipped = (int64_t)sc[SC_SKIPPED];
  return 0;
}

int gpu_begin(Trainer *t, const TrainOptions *o, const TrainState *st, GpucErr *e) {
  TrainGpu *G = t->gpu;
  const Graph *g = t->g;
  CU(cu.cuStreamSynchronize(G->main));
  free(G->tab);
  free(G->tab_param);
  G->tab = calloc((size_t)t->np + 1, sizeof *G->tab);
  G->tab_param = calloc((size_t)t->np + 1, sizeof(int));
  if (!G->tab || !G->tab_param) return gpuc_err_set(e, "out of memory");
  G->nt = 0;
  G->use_acc = o->accum > 1;
  G->gmul = 1.0f / (float)o->accum;
  uint64_t chunks = 0;
  for (int i = 0; i < t->np; i++) {
    const Value *v = &g->values[t->param[i]];
    int64_t n = gpuc_numel(&v->t);
    CUdeviceptr p = tensor_ptr(G->s, v->name, GPUC_DT_F32), p16 = half_twin(G, v->name);
    bool frozen = is_frozen(v->name, o);
    if (!frozen && !p && p16 && dev_alloc(G, &p, sizeof(float) * (size_t)n, e)) return -1; /* master */
    if (upload_param(v->t.data, n, p, p16, G->half, e)) return -1;
    if (frozen || n == 0) continue;
    CUdeviceptr gr = tensor_ptr(G->s, g->values[g->outputs[1 + i]].name, GPUC_DT_F32);
    if (!p || !gr)
      return gpuc_err_set(e, "%s: parameter '%s' or its gradient is not a tensor of the training plan",
                          g->path, v->name);
    OptTensor *x = &G->tab[G->nt];
    *x = (OptTensor){.p = p, .p16 = p16, .g = gr, .n = n};
    size_t bytes = sizeof(float) * (size_t)n;
    CUdeviceptr s0, s1 = 0, acc = 0;
    if (dev_alloc(G, &s0, bytes, e)) return -1;
    CU(cu.cuMemcpyHtoD(s0, t->state[0][i], bytes));
    if (o->opt == GPUC_OPT_ADAMW) {
      if (dev_alloc(G, &s1, bytes, e)) return -1;
      CU(cu.cuMemcpyHtoD(s1, t->state[1][i], bytes));
    }
    if (G->use_acc && dev_alloc(G, &acc, bytes, e)) return -1;
    x->s0 = s0;
    x->s1 = s1;
    x->acc = acc;
    G->tab_param[G->nt++] = i;
    chunks += (uint64_t)((n + GPUC_OPT_CHUNK - 1) / GPUC_OPT_CHUNK);
  }
  for (int j = 0; j < t->nbuf; j++)
    CU(cu.cuMemcpyHtoD(G->bn_dst[j], g->values[t->param[t->np + j]].t.data, G->bn_bytes[j]));
  if (chunks > (1u << 30)) return gpuc_err_set(e, "%s: too many parameters", g->path);
  G->nchunks = (unsigned)chunks;
  int *ct = malloc(sizeof(int) * (chunks + 1));
  int64_t *co = malloc(sizeof(int64_t) * (chunks + 1));
  if (!ct || !co) { free(ct); free(co); return gpuc_err_set(e, "out of memory"); }
  uint64_t c = 0;
  for (int k = 0; k < G->nt; k++)
    for (int64_t off = 0; off < G->tab[k].n; off += GPUC_OPT_CHUNK) { ct[c] = k; co[c++] = off; }
  int rc = dev_alloc(G, &G->d_tab, sizeof(OptTensor) * (size_t)G->nt, e) ||
           dev_alloc(G, &G->d_ct, sizeof(int) * c, e) || dev_alloc(G, &G->d_co, sizeof(int64_t) * c, e);
  CUresult r = CUDA_SUCCESS;
  if (!rc && G->nt) r = cu.cuMemcpyHtoD(G->d_tab, G->tab, sizeof(OptTensor) * (size_t)G->nt);
  if (!rc && r == CUDA_SUCCESS && c) r = cu.cuMemcpyHtoD(G->d_ct, ct, sizeof(int) * c);
  if (!rc && r == CUDA_SUCCESS && c) r = cu.cuMemcpyHtoD(G->d_co, co, sizeof(int64_t) * c);
  free(ct);
  free(co);
  if (rc) return -1;
  if (r != CUDA_SUCCESS) return gpuc_cu_fail(e, r, "cuMemcpyHtoD", __FILE__, __LINE__);
  if (upload_scalars(G, st, e)) return -1;
  G->eval_stale = true;
  return 0;
}

static int launch(TrainGpu *G, CUfunction f, unsigned grid, unsigned block, void **args, GpucErr *e) {
  if (!grid) return 0;
  CU(cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, G->main, args, NULL));
  return 0;
}

/* Micro-batch number mb of the epoch, number `micro` of its step, into
 * the plan's inputs. */
static int feed(Trainer *t, const Dataset *d, const TrainOptions *o, const int64_t *perm, int64_t mb, int micro,
                int64_t epoch, GpucErr *e) {
  TrainGpu *G = t->gpu;
  int j = G->cur;
  G->cur ^= 1;
  CU(cu.cuEventSynchronize(G->copied[j])); /* the host buffers' last copy is done */
  float *hx = G->hx[j];
  int64_t *hy = G->hy[j], B = t->batch;
  for (int64_t i = 0; i < B; i++) {
    int64_t k = perm[mb * B + i];
    gpuc_batch_image(t, d, o, k, epoch, mb * B + i, hx + i * t->dim);
    hy[i] = d->y[k];
  }
  if (G->cbytes) gpuc_dropout_counter(t, o, micro, hy + B);
  CU(cu.cuStreamWaitEvent(G->copy, G->consumed[j], 0)); /* staging j is free */
  CU(cu.cuMemcpyHtoDAsync(G->dx[j], hx, G->xbytes, G->copy));
  CU(cu.cuMemcpyHtoDAsync(G->dy[j], hy, G->ybytes + G->cbytes, G->copy));
  CU(cu.cuEventRecord(G->copied[j], G->copy));
  CU(cu.cuStreamWaitEvent(G->main, G->copied[j], 0));
  CU(cu.cuMemcpyDtoDAsync(G->x, G->dx[j], G->xbytes, G->main));
  CU(cu.cuMemcpyDtoDAsync(G->y, G->dy[j], G->ybytes, G->main));
  if (G->cbytes) CU(cu.cuMemcpyDtoDAsync(G->counter, G->dy[j] + G->ybytes, G->cbytes, G->main));
  CU(cu.cuEventRecord(G->consumed[j], G->main));
  return 0;
}

int gpu_step(Trainer *t, const Dataset *d, const TrainOptions *o, const int64_t *perm, int64_t mb0,
             int64_t epoch, double lr, GpucErr *e) {
  TrainGpu *G = t->gpu;
  unsigned T = GPUC_OPT_THREADS;
  for (int k = 0; k < o->accum; k++) {
    if (feed(t, d, o, perm, mb0 + k, k, epoch, e)) return -1;
    if (G->amp) {
      void *a[] = {&G->sc, &G->seed};
      if (launch(G, G->f_seed, 1, 1, a, e)) return -1;
    }
    if (gpuc_session_launch(G->s, e)) return -1;
    void *la[] = {&G->loss, &G->sc};
    if (launch(G, G->f_loss, 1, 1, la, e)) return -1;
    for (int j = 0; j < t->nbuf; j++) CU(cu.cuMemcpyDtoDAsync(G->bn_dst[j], G->bn_src[j], G->bn_bytes[j], G->main));
    if (G->use_acc) {
      int first = k == 0;
      void *a[] = {&G->d_tab, &G->d_ct, &G->d_co, &first};
      if (launch(G, G->f_acc, G->nchunks, T, a, e)) return -1;
    }
  }
  if (G->amp) {
    void *a[] = {&G->d_tab, &G->d_ct, &G->d_co, &G->use_acc, &G->sc};
    if (launch(G, G->f_check, G->nchunks, T, a, e)) return -1;
  }
  float flr = (float)lr, mom = (float)o->momentum, wd = (float)o->weight_decay;
  float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
  if (o->opt == GPUC_OPT_SGD) {
    void *a[] = {&G->d_tab, &G->d_ct, &G->d_co, &G->use_acc, &G->gmul, &G->sc, &flr, &mom, &wd};
    if (launch(G, G->f_sgd, G->nchunks, T, a, e)) return -1;
  } else {
    void *a[] = {&G->d_tab, &G->d_ct, &G->d_co, &G->use_acc, &G->gmul, &G->sc, &flr, &b1, &b2, &eps, &wd};
    if (launch(G, G->f_adamw, G->nchunks, T, a, e)) return -1;
  }
  int dynamic = G->amp;
  float growth = GPUC_AMP_GROWTH_STEPS, max_scale = GPUC_AMP_MAX_SCALE;
  void *a[] = {&G->sc, &dynamic, &growth, &max_scale};
  return launch(G, G->f_scale, 1, 1, a, e);
}

int gpu_loss(Trainer *t, double *mean_loss, double *loss_scale, int64_t *skipped, GpucErr *e) {
  TrainGpu *G = t->gpu;
  float sc[SC_COUNT];
  CU(cu.cuStreamSynchronize(G->main));
  if (gpuc_session_check(G->s, e)) return -1; /* a label or index the kernels found out of range */
  CU(cu.cuMemcpyDtoH(sc, G->sc, sizeof sc));
  *mean_loss = sc[SC_LOSS_N] > 0 ? (double)sc[SC_LOSS_SUM] / (double)sc[SC_LOSS_N] : 0.0;
  *loss_scale = sc[SC_SCALE];
  *skipped = (int64_t)sc[SC_SKIPPED];
  float zero[2] = {0, 0};
  CU(cu.cuMemcpyHtoD(G->sc + sizeof(float) * SC_LOSS_SUM, zero, sizeof zero));
  return 0;
}

int gpu_end_epoch(Trainer *t, GpucErr *e) {
  TrainGpu *G = t->gpu;
  const Graph *g = t->g;
  CU(cu.cuStreamSynchronize(G->main));
  for (int k = 0; k < G->nt; k++) {
    const OptTensor *x = &G->tab[k];
    int i = G->tab_param[k];
    size_t bytes = sizeof(float) * (size_t)x->n;
    CU(cu.cuMemcpyDtoH(g->values[t->param[i]].t.data, x->p, bytes));
    CU(cu.cuMemcpyDtoH(t->state[0][i], x->s0, bytes));
    if (x->s1) CU(cu.cuMemcpyDtoH(t->state[1][i], x->s1, bytes));
  }
  for (int j = 0; j < t->nbuf; j++)
    CU(cu.cuMemcpyDtoH(g->values[t->param[t->np + j]].t.data, G->bn_dst[j], G->bn_bytes[j]));
  G->eval_stale = true;
  return 0;
}

int gpu_set_masks(Trainer *t, GpucErr *e) {
  TrainGpu *G = t->gpu;
  CU(cu.cuStreamSynchronize(G->main));
  for (int k = 0; k < G->nt; k++) {
    OptTensor *x = &G->tab[k];
    int i = G->tab_param[k];
    if (!t->mask[i]) continue;
    size_t bytes = sizeof(float) * (size_t)x->n;
    CUdeviceptr m = x->mask;
    if (!m && dev_alloc(G, &m, bytes, e)) return -1;
    CU(cu.cuMemcpyHtoD(m, t->mask[i], bytes));
    x->mask = m;
    const Value *v = &t->g->values[t->param[i]];
    if (upload_param(v->t.data, x->n, x->p, x->p16, G->half, e)) return -1;
  }
  /* frozen parameters are not in the table but were pruned too */
  for (int i = 0; i < t->np; i++) {
    bool in_tab = false;
    for (int k = 0; k < G->nt; k++) in_tab |= G->tab_param[k] == i;
    if (in_tab || !t->mask[i]) continue;
    const Value *v = &t->g->values[t->param[i]];
    if (upload_param(v->t.data, gpuc_numel(&v->t), tensor_ptr(G->s, v->name, GPUC_DT_F32), half_twin(G, v->name), G->half, e))
      return -1;
  }
  if (G->nt) CU(cu.cuMemcpyHtoD(G->d_tab, G->tab, sizeof(OptTensor) * (size_t)G->nt));
  G->eval_stale = true;
  return 0;
}

/* The host parameters and running statistics into the eval plan's weights. */
static int sync_eval_plan(Trainer *t, GpucErr *e) {
  TrainGpu *G = t->gpu;
  for (int i = 0; i < t->np + t->nbuf; i++) {
    const Value *v = &t->g->values[t->param[i]];
    CUdeviceptr p = tensor_ptr(G->ev, v->name, GPUC_DT_F32);
    if (p) CU(cu.cuMemcpyHtoD(p, v->t.data, gpuc_tensor_bytes(&v->t)));
  }
  G->eval_stale = false;
  return 0;
}

int gpu_logits(Trainer *t, const float *x, int64_t n, Tensor **logits, GpucErr *e) {
  TrainGpu *G = t->gpu;
  if (G->eval_stale && sync_eval_plan(t, e)) return -1;
  const int64_t EB = t->batch;
  int64_t dims[2] = {n, t->classes};
  Tensor *out = gpuc_tensor_new(GPUC_DT_F32, 2, dims, e);
  Tensor xt = {.dt = GPUC_DT_F32, .rank = t->in_rank};
  memcpy(xt.dims, t->in_dims, sizeof xt.dims);
  xt.dims[0] = EB;
  xt.data = calloc((size_t)(EB * t->dim), sizeof(float));
  const Plan *p = gpuc_session_plan(G->ev);
  const char *in = gpuc_plan_str(p, p->tensors[0].name), *oname = NULL;
  for (uint32_t i = 0; i < p->ntensors; i++)
    if (p->tensors[i].role == PLAN_ROLE_OUTPUT) { oname = gpuc_plan_str(p, p->tensors[i].name); break; }
  int rc = -1;
  if (!out || !xt.data || !oname) { if (out && xt.data) gpuc_err_set(e, "the evaluation plan has no output"); goto done; }
  for (int64_t s = 0; s < n; s += EB) {
    int64_t b = n - s < EB ? n - s : EB; /* the last batch is padded with zeros */
    memcpy(xt.data, x + s * t->dim, sizeof(float) * (size_t)(b * t->dim));
    if (b < EB) memset((float *)xt.data + b * t->dim, 0, sizeof(float) * (size_t)((EB - b) * t->dim));
    if (gpuc_session_set_input(G->ev, in, &xt, e) || gpuc_session_replay(G->ev, e)) goto done;
    Tensor *y = gpuc_session_get_output(G->ev, oname, e);
    if (!y) goto done;
    bool ok = y->rank == 2 && y->dims[0] == EB && y->dims[1] == t->classes && y->dt == GPUC_DT_F32;
    if (ok) memcpy((float *)out->data + s * t->classes, y->data, sizeof(float) * (size_t)(b * t->classes));
    gpuc_tensor_free(y);
    if (!ok) { gpuc_err_set(e, "%s: the evaluation output is not [batch, classes] f32", t->g->path); goto done; }
  }
  *logits = out;
  out = NULL;
  rc = 0;
done:
  gpuc_tensor_free(out);
  free(xt.data);
  return rc;
}
