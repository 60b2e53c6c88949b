/* Training-mode Dropout in gpuc train.
 *
 * A model exported for training (PyTorch's TrainingMode.TRAINING) has
 * Dropout(X, ratio, training_mode = true). The ONNX reference kernel draws
 * its mask from the node's seed attribute, the same mask at every step;
 * training needs a fresh one per step. So the training graph (not eval)
 * turns each such node into the internal DropoutTrain(X, counter) with
 * attributes ratio and salt (the node's rank among them), and gets one more
 * input, the counter int64 [2] = (--seed, global micro-batch index), which
 * both executors write before each micro-batch: the CPU loop as a tensor,
 * the GPU one into the plan's input on the stream, so the captured graph
 * is replayed unchanged. The index counts micro-batches since the start
 * of training (optimizer step * accum + k), so --resume (the step is in
 * the checkpoint) draws the masks an uninterrupted run would have drawn,
 * given the same --seed.
 *
 * The evaluation graphs (test accuracy, CPU and GPU) drop the
 * training_mode input instead: Dropout is the identity there, as in
 * PyTorch's model.eval(). --save rewrites initializers only, so the saved
 * model keeps the nodes as the source had them. */
#include "train_internal.h"
#include "autodiff.h"
#include <stdio.h>
#include <string.h>

/* n's training mode and ratio, with the reason for a refusal in e. */
static int mode_of(const Graph *g, const Node *n, bool *training, double *ratio, GpucErr *e) {
  char why[160];
  if (gpuc_dropout_mode(g, n, training, ratio, why, sizeof why))
    return gpuc_err_unsupported(e, "%s: node '%s' (Dropout): %s", g->path, n->name, why);
  return 0;
}

/* The counter input, named "gpuc.step" unless the model has such a value. */
static int add_counter(Graph *g, GpucErr *e) {
  char name[64] = "gpuc.step";
  for (int k = 1; gpuc_graph_find_value(g, name) >= 0 && k < 100; k++)
    snprintf(name, sizeof name, "gpuc.step.%d", k);
  int v = gpuc_graph_add_value(g, name);
  int *ins = gpuc_arena_alloc(&g->arena, sizeof(int) * ((size_t)g->ninputs + 1));
  if (v < 0 || !ins) return gpuc_err_set(e, "out of memory");
  int64_t two = 2;
  gpuc_set_shape(&g->values[v].t, GPUC_DT_I64, 1, &two);
  g->values[v].is_input = true;
  memcpy(ins, g->inputs, sizeof(int) * (size_t)g->ninputs);
  ins[g->ninputs++] = v;
  g->inputs = ins;
  return v;
}

int gpuc_dropout_train_mode(Graph *g, GpucErr *e) {
  int counter = -1, salt = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_DROPOUT) continue;
    bool training;
    double ratio;
    if (mode_of(g, n, &training, &ratio, e)) return -1;
    /* before opset 12 only a ratio-0 node (identity) gets here in training mode */
    if (!training || g->opset < 12) continue;
    float r = (float)ratio; /* the attribute is a float: check what it will hold */
    if (!(r >= 0 && r < 1))
      return gpuc_err_set(e, "%s: node '%s' (Dropout): ratio %g is outside [0, 1)", g->path, n->name, ratio);
    if (counter < 0 && (counter = add_counter(g, e)) < 0) return -1;
    n = &g->nodes[i];
    Attr *a = gpuc_arena_alloc(&g->arena, sizeof(Attr) * 2);
    if (!a) return gpuc_err_set(e, "out of memory");
    a[0] = (Attr){.name = "ratio", .kind = GPUC_ATTR_FLOAT, .f = r};
    a[1] = (Attr){.name = "salt", .kind = GPUC_ATTR_INT, .i = salt++};
    n->op = GPUC_OP_DROPOUTTRAIN;
    n->in[1] = counter; /* a training-mode node has 3 inputs (opset 12+) */
    n->nin = 2;
    n->attrs = a;
    n->nattr = 2;
  }
  return counter < 0 ? 0 : 1;
}

int gpuc_dropout_eval_mode(Graph *g, GpucErr *e) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    bool training;
    double ratio;
    if (n->op != GPUC_OP_DROPOUT) continue;
    if (mode_of(g, n, &training, &ratio, e)) return -1;
    if (training && g->opset >= 12) n->nin = 2; /* without training_mode: inference */
  }
  return 0;
}

void gpuc_dropout_counter(const Trainer *t, const TrainOptions *o, int k, int64_t counter[2]) {
  counter[0] = (int64_t)o->seed;
  counter[1] = t->step * o->accum + k;
}
