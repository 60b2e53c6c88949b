/* The training loop on the CPU reference: the model + loss + backward graph
 * run by gpuc_ref_run per batch (inputs: images, labels; outputs: loss and
 * one gradient per parameter), SGD with momentum and weight decay applied on
 * the host to the parameters' constant data, test accuracy with a
 * forward-only copy of the model that gets the trained weights. */
#include "train_internal.h"
#include "autodiff.h"
#include "passes.h"
#include "frontend.h"
#include "ref.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>



static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gpuc_trainer_free(Trainer *t) {
  if (!t) return;
  gpu_free(t->gpu);
  gpuc_graph_free(t->g);
  gpuc_graph_free(t->eval);
  for (int i = 0; i < t->np + t->nbuf; i++) {
    if (t->state[0]) free(t->state[0][i]);
    if (t->state[1]) free(t->state[1][i]);
    if (t->gsum) free(t->gsum[i]);
    if (t->mask) free(t->mask[i]);
  }
  free(t->mask);
  free(t->state[0]);
  free(t->state[1]);
  free(t->gsum);
  free(t->param);
  free(t->eval_param);
  free(t);
}

const Graph *gpuc_trainer_graph(const Trainer *t) { return t->g; }
int gpuc_trainer_nparams(const Trainer *t) { return t->np + t->nbuf; }
float *gpuc_trainer_state(Trainer *t, int i, int slot) { return t->state[slot][i]; }
const char *gpuc_trainer_param(const Trainer *t, int i, const Tensor **value) {
  *value = &t->g->values[t->param[i]].t;
  return t->g->values[t->param[i]].name;
}

/* One float input [batch, features...] and one float output [batch, C]. */
static int check_io(const Graph *g, GpucErr *e) {
  if (g->ninputs != 1)
    return gpuc_err_set(e, "%s: training needs a model with one input (images), it has %d", g->path,
                        g->ninputs);
  if (g->noutputs != 1)
    return gpuc_err_set(e, "%s: training needs a model with one output (scores), it has %d", g->path,
                        g->noutputs);
  const Tensor *x = &g->values[g->inputs[0]].t, *y = &g->values[g->outputs[0]].t;
  if (x->dt != GPUC_DT_F32 || x->rank < 2)
    return gpuc_err_set(e, "%s: the input must be f32 [batch, ...]", g->path);
  for (int i = 1; i < x->rank; i++)
    if (x->dims[i] < 0) return gpuc_err_set(e, "%s: the input's dims after the batch must be known", g->path);
  if (y->dt != GPUC_DT_F32 || (y->rank >= 0 && y->rank != 2))
    return gpuc_err_set(e, "%s: the output must be f32 scores [batch, classes]", g->path);
  return 0;
}

static Attr *node_attrs(Graph *g, Node *n, int cap) {
  n->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (size_t)cap);
  return n->attrs;
}

/* ---- BatchNormalization in training mode --------------------------------
 * A model exported for inference has BatchNormalization with training_mode
 * 0 and the running statistics as initializers. The training graph (not
 * eval) switches each node to training mode, as PyTorch's model.train():
 * Y uses the batch statistics, and the outputs running_mean / running_var
 * (input * momentum + batch * (1 - momentum), momentum attribute 0.9 by
 * default; the batch variance is the biased one, as ONNX defines it) are
 * graph outputs copied back onto the initializers after every micro-batch.
 * Those initializers are the trainer's buffers: evaluation, --save and
 * checkpoints carry them like parameters. */

/* A new value named NODE.SUFFIX produced by output k of node ni. */
static int new_output(Graph *g, int ni, int k, const char *suffix, GpucErr *e) {
  char name[600];
  snprintf(name, sizeof name, "%s.%s", g->nodes[ni].name, suffix);
  int v = gpuc_graph_add_value(g, name);
  if (v < 0) return gpuc_err_set(e, "out of memory");
  g->values[v].producer = ni;
  g->nodes[ni].out[k] = v;
  return 0;
}

/* Node ni in training mode with outputs (Y, running_mean, running_var). */
static int bn_train_node(Graph *g, int ni, GpucErr *e) {
  Node *n = &g->nodes[ni];
  if (g->opset < 9)
    return gpuc_err_unsupported(e, "%s: node '%s': BatchNormalization before opset 9 is not trained",
                                g->path, n->name);
  for (int k = 3; k < 5; k++) {
    const Value *v = k < n->nin && n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
    if (!v || !v->is_const || v->t.dt != GPUC_DT_F32)
      return gpuc_err_unsupported(e, "%s: node '%s': the running statistics must be f32 initializers",
                                  g->path, n->name);
  }
  if (n->nout < 3) { /* opset 9..13 infer training mode from these outputs */
    int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * 3);
    if (!outs) return gpuc_err_set(e, "out of memory");
    for (int k = 0; k < 3; k++) outs[k] = k < n->nout ? n->out[k] : -1;
    n->out = outs;
    n->nout = 3;
  }
  if (n->out[1] < 0 && new_output(g, ni, 1, "running_mean", e)) return -1;
  if (n->out[2] < 0 && new_output(g, ni, 2, "running_var", e)) return -1;
  if (g->opset < 14 || gpuc_attr_i(n, "training_mode", 0) == 1) return 0;
  /* training_mode = 1: a copy of the attributes with it set or added */
  Attr *a = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (size_t)(n->nattr + 1));
  if (!a) return gpuc_err_set(e, "out of memory");
  int na = 0;
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attrs[i].name, "training_mode")) a[na++] = n->attrs[i];
  a[na++] = (Attr){.name = "training_mode", .kind = GPUC_ATTR_INT, .i = 1};
  n->attrs = a;
  n->nattr = na;
  return 0;
}

static int bn_train_mode(Graph *g, GpucErr *e) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == GPUC_OP_BATCHNORMALIZATION && bn_train_node(g, i, e)) return -1;
  return 0;
}

/* After autodiff: the running-statistics outputs appended to the graph's
 * outputs (after the loss and the gradients), and their initializers
 * recorded as buffers np.. in t->param. */
static int bn_buffers(Trainer *t, GpucErr *e) {
  Graph *g = t->g;
  int nbn = 0;
  for (int i = 0; i < g->nnodes; i++) nbn += g->nodes[i].op == GPUC_OP_BATCHNORMALIZATION;
  if (!nbn) return 0;
  int *outs = gpuc_arena_alloc(&g->arena, sizeof(int) * (size_t)(g->noutputs + 2 * nbn));
  if (!outs) return gpuc_err_set(e, "out of memory");
  memcpy(outs, g->outputs, sizeof(int) * (size_t)g->noutputs);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_BATCHNORMALIZATION) continue;
    for (int k = 1; k < 3; k++) {
      for (int j = 0; j < t->nbuf; j++) /* one initializer updated by two nodes */
        if (t->param[t->np + j] == n->in[k + 2])
          return gpuc_err_unsupported(e, "%s: running statistics '%s' shared by two BatchNormalization nodes",
                                      g->path, g->values[n->in[k + 2]].name);
      t->param[t->np + t->nbuf++] = n->in[k + 2];
      outs[g->noutputs++] = n->out[k];
      g->values[n->out[k]].is_output = true;
    }
  }
  g->outputs = outs;
  return 0;
}

/* The new running statistics of the last run onto their initializers. */
static void bn_update(Trainer *t, Tensor **outs) {
  for (int j = 0; j < t->nbuf; j++) {
    Tensor *dst = &t->g->values[t->param[t->np + j]].t;
    memcpy(dst->data, outs[1 + t->np + j]->data, gpuc_tensor_bytes(dst));
  }
}

Trainer *gpuc_trainer_new(const char *model_path, int64_t batch, GpucErr *e) {
  Trainer *t = calloc(1, sizeof *t);
  if (!t) { gpuc_err_set(e, "out of memory"); return NULL; }
  t->batch = batch;
  if (!(t->g = gpuc_onnx_load(model_path, NULL, 0, e))) goto fail;
  if (!(t->eval = gpuc_onnx_load(model_path, NULL, 0, e))) goto fail;
  Graph *g = t->g;
  if (check_io(g, e) || bn_train_mode(g, e) || gpuc_dropout_eval_mode(t->eval, e)) goto fail;
  /* bind the batch */
  Value *xin = &g->values[g->inputs[0]];
  t->in_rank = xin->t.rank;
  memcpy(t->in_dims, xin->t.dims, sizeof t->in_dims);
  if (xin->t.dims[0] >= 0 && xin->t.dims[0] != batch) {
    /* a batch fixed by the exporter (often 1): made symbolic in both graphs
     * and re-inferred; a model whose other shapes depend on it (a Reshape
     * to a constant [1, ...]) fails the inference below. */
    Graph *ev = t->eval;
    xin->t.dims[0] = -1;
    ev->values[ev->inputs[0]].t.dims[0] = -1;
    if (gpuc_graph_infer(g, e) || gpuc_graph_infer(ev, e)) goto fail;
  }
  int64_t dims[GPUC_MAX_RANK];
  memcpy(dims, xin->t.dims, sizeof dims);
  dims[0] = batch;
  t->dim = gpuc_shape_numel(t->in_rank - 1, dims + 1);
  if (gpuc_graph_bind_shape(g, xin->name, t->in_rank, dims, e) || gpuc_graph_infer(g, e)) goto fail;
  int logits = g->outputs[0];
  const Tensor *lt = &g->values[logits].t;
  if (!gpuc_shape_known(lt) || lt->rank != 2 || lt->dims[0] != batch) {
    gpuc_err_set(e, "%s: the output is not [batch, classes] once the batch is bound", g->path);
    goto fail;
  }
  t->classes = lt->dims[1];
  /* labels input */
  const char *lname = "labels";
  char buf[64];
  for (int k = 1; gpuc_graph_find_value(g, lname) >= 0 && k < 100; k++) {
    snprintf(buf, sizeof buf, "labels.%d", k);
    lname = buf;
  }
  int lab = gpuc_graph_add_value(g, lname), loss = gpuc_graph_add_value(g, "loss.train");
  int *ins = gpuc_arena_alloc(&g->arena, sizeof(int) * 2);
  int ni = gpuc_graph_add_node(g, GPUC_OP_SOFTMAXCROSSENTROPYLOSS, "loss.train", 2, 1);
  if (lab < 0 || loss < 0 || !ins || ni < 0 || !node_attrs(g, &g->nodes[ni], 1)) {
    gpuc_err_set(e, "out of memory");
    goto fail;
  }
  int64_t ld = batch;
  gpuc_set_shape(&g->values[lab].t, GPUC_DT_I64, 1, &ld);
  g->values[lab].is_input = true;
  ins[0] = g->inputs[0];
  ins[1] = lab;
  g->inputs = ins;
  g->ninputs = 2;
  Node *n = &g->nodes[ni];
  n->in[0] = logits;
  n->in[1] = lab;
  n->out[0] = loss;
  n->attrs[0] = (Attr){.name = "reduction", .kind = GPUC_ATTR_STRING, .s = "mean"};
  n->nattr = 1;
  g->values[loss].producer = ni;
  g->values[logits].is_output = false;
  g->values[loss].is_output = true;
  g->outputs[0] = loss;
  int drop = gpuc_dropout_train_mode(g, e); /* inputs[2]: the counter */
  if (drop < 0) goto fail;
  t->counter = drop == 1;
  if (gpuc_graph_infer(g, e) || gpuc_autodiff(g, loss, e) || gpuc_graph_infer(g, e)) goto fail;
  /* parameters, in the order of the gradient outputs */
  t->np = g->noutputs - 1;
  if (t->np < 1) { gpuc_err_set(e, "%s: the model has no trainable parameters", g->path); goto fail; }
  int nbn = 0;
  for (int i = 0; i < g->nnodes; i++) nbn += g->nodes[i].op == GPUC_OP_BATCHNORMALIZATION;
  size_t total = (size_t)(t->np + 2 * nbn);
  t->param = calloc(total, sizeof(int));
  t->eval_param = calloc(total, sizeof(int));
  t->state[0] = calloc(total, sizeof(float *));
  t->state[1] = calloc(total, sizeof(float *));
  t->gsum = calloc(total, sizeof(float *));
  t->mask = calloc(total, sizeof(float *));
  if (!t->mask || !t->param || !t->eval_param || !t->state[0] || !t->state[1] || !t->gsum) {
    gpuc_err_set(e, "out of memory");
    goto fail;
  }
  for (int i = 0; i < t->np; i++) {
    const char *gn = g->values[g->outputs[i + 1]].name;
    char pn[1024];
    snprintf(pn, sizeof pn, "%.*s", (int)(strlen(gn) - 5), gn);
    t->param[i] = gpuc_graph_find_value(g, pn);
    GPUC_ASSERT(t->param[i] >= 0);
  }
  if (bn_buffers(t, e)) goto fail;
  /* each parameter and buffer: f32, found again in eval; optimizer state
   * (zero and unused for buffers, so checkpoints keep one layout) */
  for (int i = 0; i < t->np + t->nbuf; i++) {
    int p = t->param[i];
    const char *pn = g->values[p].name;
    int q = gpuc_graph_find_value(t->eval, pn);
    if (g->values[p].t.dt != GPUC_DT_F32) {
      gpuc_err_unsupported(e, "%s: parameter '%s' is %s; training supports f32 parameters", g->path, pn,
                           gpuc_dtype_name(g->values[p].t.dt));
      goto fail;
    }
    if (q < 0 || !t->eval->values[q].is_const ||
        gpuc_tensor_bytes(&t->eval->values[q].t) != gpuc_tensor_bytes(&g->values[p].t)) {
      gpuc_err_set(e, "%s: parameter '%s' not found in the model again", g->path, pn);
      goto fail;
    }
    t->eval_param[i] = q;
    size_t n = (size_t)gpuc_numel(&g->values[p].t) + 1;
    t->state[0][i] = calloc(n, sizeof(float));
    t->state[1][i] = calloc(n, sizeof(float));
    t->gsum[i] = calloc(n, sizeof(float));
    if (!t->state[0][i] || !t->state[1][i] || !t->gsum[i]) { gpuc_err_set(e, "out of memory"); goto fail; }
  }
  return t;
fail:
  gpuc_trainer_free(t);
  return NULL;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int check_data(const Trainer *t, const Dataset *d, GpucErr *e) {
  if (d->dim != t->dim)
    return gpuc_err_set(e, "%s: the model takes %lld values per image, the data has %lld", t->g->path,
                        (long long)t->dim, (long long)d->dim);
  if (d->rank > 0) {
    bool same = d->rank == t->in_rank - 1;
    for (int i = 0; same && i < d->rank; i++) same = d->shape[i] == t->in_dims[i + 1];
    if (!same)
      return gpuc_err_set(e, "%s: the data's per-image shape is not the model input's (batch excluded)",
                          t->g->path);
  }
  for (int64_t i = 0; i < d->n; i++)
    if (d->y[i] < 0 || d->y[i] >= t->classes)
      return gpuc_err_set(e, "%s: label %lld is outside the model's %lld classes", t->g->path,
                          (long long)d->y[i], (long long)t->classes);
  return 0;
}

/* The trained parameters and running statistics onto the eval graph. */
static void sync_eval(Trainer *t) {
  for (int i = 0; i < t->np + t->nbuf; i++) {
    const Tensor *src = &t->g->values[t->param[i]].t;
    memcpy(t->eval->values[t->eval_param[i]].t.data, src->data, gpuc_tensor_bytes(src));
  }
}

int gpuc_trainer_logits(Trainer *t, const float *x, int64_t n, Tensor **logits, GpucErr *e) {
  if (t->gpu) return gpu_logits(t, x, n, logits, e);
  sync_eval(t);
  Tensor xt = {.dt = GPUC_DT_F32, .rank = t->in_rank, .data = (void *)x};
  memcpy(xt.dims, t->in_dims, sizeof xt.dims);
  xt.dims[0] = n;
  const Tensor *in[1] = {&xt};
  Tensor *out[1] = {NULL};
  if (gpuc_ref_run(t->eval, in, out, e)) return -1;
  const Tensor *y = out[0];
  if (y->rank != 2 || y->dims[0] != n || y->dims[1] != t->classes) {
    gpuc_tensor_free(out[0]);
    return gpuc_err_set(e, "%s: the output is not [batch, classes]", t->g->path);
  }
  *logits = out[0];
  return 0;
}

void gpuc_score_logits(const Tensor *y, const int64_t *labels, int64_t n, int64_t classes, int64_t *correct,
                       double *loss_sum) {
  for (int64_t i = 0; i < n; i++) {
    int64_t best = 0;
    double bv = -INFINITY;
    for (int64_t k = 0; k < classes; k++) {
      double v = gpuc_get_f64(y, i * classes + k);
      if (v > bv) { bv = v; best = k; }
    }
    *correct += best == labels[i];
    if (!loss_sum) continue;
    /* -log softmax(y)[label] = log sum exp(y - max) - (y[label] - max) */
    double s = 0;
    for (int64_t k = 0; k < classes; k++) s += exp(gpuc_get_f64(y, i * classes + k) - bv);
    *loss_sum += log(s) - (gpuc_get_f64(y, i * classes + labels[i]) - bv);
  }
}

int gpuc_trainer_evaluate(Trainer *t, const Dataset *d, double *accuracy, GpucErr *e) {
  if (check_data(t, d, e)) return -1;
  const int64_t eb = 500;
  int64_t correct = 0;
  for (int64_t s = 0; s < d->n; s += eb) {
    int64_t b = d->n - s < eb ? d->n - s : eb;
    Tensor *y;
    if (gpuc_trainer_logits(t, d->x + s * d->dim, b, &y, e)) return -1;
    gpuc_score_logits(y, d->y + s, b, t->classes, &correct, NULL);
    gpuc_tensor_free(y);
  }
  *accuracy = (double)correct / (double)d->n;
  return 0;
}

/* A fresh permutation of 0..n-1 per epoch from the generator state alone,
 * so a checkpoint needs only the state to continue with the same order. */
static void shuffle(int64_t *perm, int64_t n, uint64_t *rng) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(splitmix(rng) % (uint64_t)(i + 1)), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
}

static bool frozen(const char *name, const TrainOptions *o) {
  for (int k = 0; k < o->nfreeze; k++)
    if (strstr(name, o->freeze[k])) return true;
  return false;
}

/* Buffers of one fit: the shuffled order, one micro-batch of inputs and the
 * graph's outputs. */
typedef struct Loop {
  int64_t *perm;
  int64_t epoch;                /* for the augmentations' draw */
  const TrainOptions *o;
  Tensor x, y;
  Tensor counter;               /* int64 [2]: training-mode Dropout's (seed, micro-batch) */
  int64_t counter_data[2];
  Tensor **outs;
  bool *skip;                   /* frozen parameters */
} Loop;

static void loop_free_outs(const Trainer *t, Loop *l) {
  for (int k = 0; l->outs && k < t->g->noutputs; k++) { gpuc_tensor_free(l->outs[k]); l->outs[k] = NULL; }
}

/* Forward + backward over micro-batch number mb of the epoch (images
 * perm[mb*B .. mb*B+B)); the gradients are left in l->outs[1..]. */
static int run_micro(Trainer *t, const Dataset *d, Loop *l, int64_t mb, double *loss, GpucErr *e) {
  int64_t B = t->batch;
  for (int64_t i = 0; i < B; i++) {
    int64_t k = l->perm[mb * B + i];
    gpuc_batch_image(t, d, l->o, k, l->epoch, mb * B + i, (float *)l->x.data + i * t->dim);
    ((int64_t *)l->y.data)[i] = d->y[k];
  }
  const Tensor *in[3] = {&l->x, &l->y, &l->counter};
  if (gpuc_ref_run(t->g, in, l->outs, e)) return -1;
  bn_update(t, l->outs);
  *loss = gpuc_get_f64(l->outs[0], 0);
  return 0;
}

/* One optimizer step over o->accum micro-batches starting at number mb0:
 * gradients summed in order, then divided by accum (each is already a mean
 * over its micro-batch), so accum x B equals one batch of accum*B. */
static int train_step(Trainer *t, const Dataset *d, const TrainOptions *o, Loop *l, int64_t mb0,
                      int64_t step, double lr, double *loss, GpucErr *e) {
  int K = o->accum;
  *loss = 0;
  for (int k = 0; k < K; k++) {
    double lk;
    gpuc_dropout_counter(t, o, k, l->counter_data);
    if (run_micro(t, d, l, mb0 + k, &lk, e)) return -1;
    *loss += lk;
    if (K == 1) break; /* the gradients are used where they are */
    for (int i = 0; i < t->np; i++) {
      const float *g = l->outs[i + 1]->data;
      float *s = t->gsum[i];
      int64_t n = gpuc_numel(l->outs[i + 1]);
      if (k == 0) memcpy(s, g, sizeof(float) * (size_t)n);
      else for (int64_t j = 0; j < n; j++) s[j] += g[j];
    }
    loop_free_outs(t, l);
  }
  *loss /= K;
  if (!isfinite(*loss)) return gpuc_err_set(e, "the loss is %g at step %lld: lower --lr", *loss, (long long)step + 1);
  for (int i = 0; i < t->np; i++) {
    Tensor *pt = &t->g->values[t->param[i]].t;
    int64_t n = gpuc_numel(pt);
    float *g = K == 1 ? l->outs[i + 1]->data : t->gsum[i];
    if (l->skip[i]) continue;
    if (K > 1) for (int64_t j = 0; j < n; j++) g[j] *= 1.0f / (float)K;
    if (o->opt == GPUC_OPT_SGD)
      gpuc_sgd_step(pt->data, t->state[0][i], g, n, (float)lr, (float)o->momentum, (float)o->weight_decay);
    else
      gpuc_adamw_step(pt->data, t->state[0][i], t->state[1][i], g, n, (float)lr, (float)o->beta1,
                      (float)o->beta2, (float)o->eps, (float)o->weight_decay, step + 1);
    if (t->mask[i]) { /* --prune: pruned weights stay zero */
      float *p = pt->data;
      for (int64_t j = 0; j < n; j++) p[j] *= t->mask[i][j];
    }
  }
  loop_free_outs(t, l);
  return 0;
}

/* --prune: the Conv and Linear weights of the forward model (found in the
 * eval graph, so the backward's GEMMs, which read the weights transposed,
 * are not mistaken for layers) pruned as the compiler's pass prunes them
 * (passes/prune.c), and a mask per pruned parameter kept for every later
 * update. A resumed run prunes its loaded weights again: their zeros are
 * the smallest magnitudes, so the mask comes out the same (up to weights
 * that are exactly zero anyway). */
static int prune_params(Trainer *t, const TrainOptions *o, int64_t step, GpucErr *e) {
  const Graph *ev = t->eval;
  int layers = 0;
  int64_t zeros_all = 0, n_all = 0;
  for (int k = 0; k < ev->nnodes; k++) {
    int kaxis, v = gpuc_prune_target(ev, &ev->nodes[k], o->prune_kind, &kaxis);
    int i = -1;
    for (int j = 0; v >= 0 && j < t->np; j++)
      if (t->eval_param[j] == v) i = j;
    if (i < 0 || t->mask[i]) continue; /* not a parameter, or shared and done */
    Tensor *w = &t->g->values[t->param[i]].t;
    int64_t n = gpuc_numel(w);
    int64_t zeros = gpuc_prune_weight(w, o->prune_kind, o->prune_fraction, kaxis, e);
    if (zeros == -1) return -1;
    if (zeros == -2) {
      if (o->log) fprintf(o->log, "  --prune 2:4: '%s' stays dense: K = %lld does not divide by 4\n",
                          ev->values[v].name, (long long)w->dims[kaxis]);
      continue;
    }
    if (!(t->mask[i] = malloc(sizeof(float) * (size_t)(n + 1)))) return gpuc_err_set(e, "out of memory");
    const float *wd = w->data;
    for (int64_t j = 0; j < n; j++) t->mask[i][j] = wd[j] != 0.0f;
    layers++;
    zeros_all += zeros;
    n_all += n;
    if (o->log)
      fprintf(o->log, "  pruned %s (%s) '%s': %.2f%% zeros (%lld of %lld)\n", ev->nodes[k].name,
              gpuc_op_name(&ev->nodes[k]), ev->values[v].name, 100.0 * (double)zeros / (double)(n ? n : 1),
              (long long)zeros, (long long)n);
  }
  if (o->log)
    fprintf(o->log, "pruned %d layers (%s) before step %lld: %.2f%% of their %lld weights are zero; the masks "
            "stay fixed\n", layers, o->prune_kind == GPUC_PRUNE_24 ? "2:4" : "l1", (long long)step + 1,
            100.0 * (double)zeros_all / (double)(n_all ? n_all : 1), (long long)n_all);
  if (!layers)
    return gpuc_err_set(e, "%s: --prune: no %s reads a parameter as its weight", t->g->path,
                        o->prune_kind == GPUC_PRUNE_24 ? "Linear layer (MatMul/Gemm with a 2-D B, K a multiple of 4)"
                                                       : "Conv or Linear layer");
  t->pruned = true;
  return t->gpu ? gpu_set_masks(t, e) : 0;
}

static int loop_init(Trainer *t, const Dataset *d, const TrainOptions *o, Loop *l, GpucErr *e) {
  int64_t B = t->batch;
  memset(l, 0, sizeof *l);
  l->o = o;
  l->x = (Tensor){.dt = GPUC_DT_F32, .rank = t->in_rank};
  memcpy(l->x.dims, t->in_dims, sizeof l->x.dims);
  l->x.dims[0] = B;
  l->y = (Tensor){.dt = GPUC_DT_I64, .rank = 1, .dims = {B}};
  l->counter = (Tensor){.dt = GPUC_DT_I64, .rank = 1, .dims = {2}, .data = l->counter_data};
  l->perm = malloc(sizeof(int64_t) * (size_t)d->n);
  l->x.data = malloc(sizeof(float) * (size_t)(B * t->dim));
  l->y.data = malloc(sizeof(int64_t) * (size_t)B);
  l->outs = calloc((size_t)t->g->noutputs, sizeof(Tensor *));
  l->skip = calloc((size_t)t->np, sizeof(bool));
  if (!l->perm || !l->x.data || !l->y.data || !l->outs || !l->skip) return gpuc_err_set(e, "out of memory");
  for (int k = 0; k < o->nfreeze; k++) {
    bool any = false;
    for (int i = 0; i < t->np; i++) any |= strstr(t->g->values[t->param[i]].name, o->freeze[k]) != NULL;
    if (!any) return gpuc_err_set(e, "%s: --freeze '%s' matches no parameter", t->g->path, o->freeze[k]);
  }
  for (int i = 0; i < t->np; i++) l->skip[i] = frozen(t->g->values[t->param[i]].name, o);
  return 0;
}

static void loop_free(const Trainer *t, Loop *l) {
  loop_free_outs(t, l);
  free(l->outs);
  free(l->perm);
  free(l->x.data);
  free(l->y.data);
  free(l->skip);
}

static void log_step(const TrainOptions *o, int ep, int64_t s, int64_t spe, double loss, double lr,
                     double ips, double scale, int64_t skipped) {
  /* loss with 6 decimals: tests compare runs step by step */
  fprintf(o->log, "epoch %d step %lld/%lld loss %.6f lr %.6g images/s %.0f loss scale %g", ep,
          (long long)s + 1, (long long)spe, loss, lr, ips, scale);
  if (skipped) fprintf(o->log, " skipped %lld", (long long)skipped);
  fprintf(o->log, "\n");
  fflush(o->log);
}

static void log_resume(const TrainOptions *o, const TrainState *st) {
  fprintf(o->log, "resumed from %s/checkpoint.bin at epoch %lld, step %lld", o->resume_dir, (long long)st->epoch,
          (long long)st->step);
  if (st->loss_scale > 0)
    fprintf(o->log, ", loss scale %g after %lld clean steps, skipped %lld", st->loss_scale,
            (long long)st->amp_clean, (long long)st->amp_skipped);
  fprintf(o->log, "\n");
}

int gpuc_trainer_fit(Trainer *t, const Dataset *train, const Dataset *test, const TrainOptions *o,
                     TrainResult *r, GpucErr *e) {
  memset(r, 0, sizeof *r);
  if (check_data(t, train, e) || (test && check_data(t, test, e))) return -1;
  int64_t B = t->batch, K = o->accum, spe = train->n / (B * K);
  if (spe < 1)
    return gpuc_err_set(e, "a step (%lld images: --batch x --accum) is larger than the training set (%lld)",
                        (long long)(B * K), (long long)train->n);
  if (o->max_steps > 0 && spe > o->max_steps) spe = o->max_steps;
  TrainState st = {.opt = o->opt, .rng = o->seed, .batch = B, .accum = K, .ntrain = train->n};
  if (o->resume_dir && gpuc_checkpoint_load(o->resume_dir, t, &st, e)) return -1;
  if (o->resume_dir && o->log) log_resume(o, &st);
  Loop l;
  int rc = -1;
  if (loop_init(t, train, o, &l, e)) goto done;
  int64_t total = (int64_t)o->epochs * spe;
  if (o->augment && (t->in_rank != 4 || (o->crop_pad < 0 || o->crop_pad > t->in_dims[2] || o->crop_pad > t->in_dims[3]))) {
    gpuc_err_set(e, "%s: --augment needs image input [batch, C, H, W] and a crop padding within H and W", t->g->path);
    goto done;
  }
  if (t->gpu && gpu_begin(t, o, &st, e)) goto done;
  double t_start = now_s();
  for (int ep = (int)st.epoch + 1; ep <= o->epochs; ep++) {
    shuffle(l.perm, train->n, &st.rng);
    l.epoch = ep;
    double t_ep = now_s(), t_log = t_ep, loss_acc = 0;
    int64_t loss_n = 0;
    for (int64_t s = 0; s < spe; s++) {
      double lr = gpuc_lr_at(o->sched, o->lr, st.step, total, spe, o->warmup, o->step_size), loss = 0;
      bool log_now = o->log && o->log_every > 0 && (s + 1) % o->log_every == 0;
      t->step = st.step;
      if (o->prune_kind && !t->pruned && st.step >= o->prune_after &&
          ((t->gpu && gpu_end_epoch(t, e)) || prune_params(t, o, st.step, e)))
        goto done;
      if (t->gpu ? gpu_step(t, train, o, l.perm, s * K, ep, lr, e)
                 : train_step(t, train, o, &l, s * K, st.step, lr, &loss, e)) {
        gpuc_err_prefix(e, "training");
        goto done;
      }
      st.step++;
      r->steps++;
      double scale = 1, mean = 0;
      int64_t skipped = 0;
      if (t->gpu) { /* the device sums the losses; read only when reported */
        if (log_now || s + 1 == spe) {
          if (gpu_loss(t, &loss, &scale, &skipped, e)) goto done;
          if (!isfinite(loss)) {
            gpuc_err_set(e, "training: the loss is %g by step %lld: lower --lr", loss, (long long)st.step);
            goto done;
          }
          r->last_loss = mean = loss;
        }
      } else {
        loss_acc += loss;
        loss_n++;
        r->last_loss = loss;
        mean = loss_acc / (double)loss_n;
      }
      if (log_now) {
        double tn = now_s();
        log_step(o, ep, s, spe, mean, lr, (double)(o->log_every * B * K) / (tn - t_log), scale, skipped);
        t_log = tn;
        loss_acc = 0;
        loss_n = 0;
      }
    }
    if (t->gpu && (gpu_end_epoch(t, e) || gpu_amp_state(t, &st, e))) goto done;
    st.epoch = ep;
    double t_train = now_s() - t_ep;
    if (test) {
      if (gpuc_trainer_evaluate(t, test, &r->test_accuracy, e)) goto done;
      if (o->log) {
        fprintf(o->log, "epoch %d: test accuracy %.2f%% (%lld images), %.1f s training, %.0f images/s\n",
                ep, 100.0 * r->test_accuracy, (long long)test->n, t_train,
                (double)(spe * B * K) / t_train);
        fflush(o->log);
      }
    }
    if (o->checkpoint_dir) {
      if (gpuc_checkpoint_save(o->checkpoint_dir, t, &st, e)) goto done;
      if (o->log) fprintf(o->log, "checkpoint %s/checkpoint.bin (epoch %d)\n", o->checkpoint_dir, ep);
    }
  }
  if (o->prune_kind && !t->pruned && o->log)
    fprintf(o->log, "note: --prune-after %lld: training ended after step %lld, nothing was pruned\n",
            (long long)o->prune_after, (long long)st.step);
  /* a resumed run with nothing left to do still reports the accuracy */
  if (test && st.epoch >= o->epochs && r->steps == 0 && gpuc_trainer_evaluate(t, test, &r->test_accuracy, e))
    goto done;
  r->seconds = now_s() - t_start;
  r->loss_scale = st.loss_scale;
  r->amp_skipped = st.amp_skipped;
  rc = 0;
done:
  loop_free(t, &l);
  return rc;
}
