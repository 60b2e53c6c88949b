/* Why a value has no static shape, in words, for the compile error.
 *
 * Two walks up the producers. First along unknown shapes: a node whose
 * output shape is unknown because an input's shape is unknown passes the
 * question to that input, until the node where it starts (every input
 * shape known, the output's not) or a graph input with unbound dims.
 * There the missing piece is data: an input whose values inference needs
 * (Reshape's shape, Expand's shape, Range's limits, ...) is not a
 * constant. Second walk along that data: each producer that did not fold
 * names the input that kept it from folding, until a Shape of an unknown
 * shape, a graph input (data known only at run time), or a node that
 * could not fold for another reason. */
#include "ir.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define EXPLAIN_MAX_LINKS 12 /* nodes named in one chain before "..." */

typedef struct Out {
  char *buf;
  size_t n, len;
} Out;

static void put(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Out *o, const char *fmt, ...) {
  if (o->len >= o->n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(o->buf + o->len, o->n - o->len, fmt, ap);
  va_end(ap);
  if (k > 0) o->len += (size_t)k < o->n - o->len ? (size_t)k : o->n - o->len - 1;
}

static bool value_known(const Value *v) { return gpuc_shape_known(&v->t) && v->t.dt != GPUC_DT_UNDEF; }

static const Node *producer(const Graph *g, int v) {
  int p = g->values[v].producer;
  return p >= 0 && p < g->nnodes ? &g->nodes[p] : NULL;
}

/* the first input of n whose shape is unknown, or -1 */
static int unknown_shape_input(const Graph *g, const Node *n) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] >= 0 && !value_known(&g->values[n->in[k]])) return k;
  return -1;
}

/* the input of n whose data is missing: an integer one first (shape
 * tensors are), else any that is not a constant; -1 if all are constants */
static int unknown_data_input(const Graph *g, const Node *n) {
  int any = -1;
  for (int k = 0; k < n->nin; k++) {
    if (n->in[k] < 0 || g->values[n->in[k]].is_const) continue;
    if (gpuc_dtype_is_int(g->values[n->in[k]].t.dt) || g->values[n->in[k]].t.dt == GPUC_DT_BOOL) return k;
    if (any < 0) any = k;
  }
  return any;
}

static void put_shape(Out *o, const Tensor *t) {
  char s[128];
  if (t->rank < 0) { put(o, "of unknown rank"); return; }
  gpuc_shape_str(t, s, sizeof s);
  put(o, "%s", s);
}

/* The data chain from value v up: "'A' (Op) <- 'B' (Op) <- ... (reason)". */
static void data_chain(const Graph *g, int v, Out *o) {
  for (int links = 0;; links++) {
    const Value *val = &g->values[v];
    const Node *n = producer(g, v);
    if (!n) {
      if (val->is_input) put(o, "graph input '%s' (data known only at run time)", val->name);
      else put(o, "'%s' (no producer, not a constant)", val->name);
      return;
    }
    if (links == EXPLAIN_MAX_LINKS) { put(o, "..."); return; }
    put(o, "'%s' (%s)", n->name, gpuc_op_name(n));
    if (gpuc_ops[n->op].flags & GPUC_OPF_SHAPE) { /* reads shapes only, never data */
      int k = unknown_shape_input(g, n);
      if (k >= 0) {
        put(o, ", the shape of '%s' being ", g->values[n->in[k]].name);
        put_shape(o, &g->values[n->in[k]].t);
      } else {
        put(o, " (not folded, though the shape it reads is known)");
      }
      return;
    }
    int k = unknown_data_input(g, n);
    if (k < 0) {
      /* every input is a constant, yet the node stayed */
      if (!value_known(val)) put(o, " (data unknown: its output shape is not known)");
      else if (val->is_output) put(o, " (data unknown: a graph output, computed at run time)");
      else put(o, " (data unknown: not folded, too large or not foldable)");
      return;
    }
    put(o, " <- ");
    v = n->in[k];
  }
}

void gpuc_explain_unknown_shape(const Graph *g, int v, char *buf, size_t n) {
  Out o = {buf, n, 0};
  if (n == 0) return;
  buf[0] = 0;
  const Value *val = &g->values[v];
  const Node *p = producer(g, v);
  if (p) put(&o, "value '%s' of node '%s' (%s) has no static shape", val->name, p->name, gpuc_op_name(p));
  else put(&o, "value '%s' has no static shape", val->name);
  /* walk unknown shapes up to where they start */
  int cur = v, hops = 0;
  for (const Node *q = p; q; q = producer(g, cur)) {
    int k = unknown_shape_input(g, q);
    if (k < 0) break;
    cur = q->in[k];
    hops++;
  }
  const Value *start = &g->values[cur];
  const Node *sp = producer(g, cur);
  if (!sp) {
    if (start->is_input) {
      if (hops) put(&o, ": it follows from graph input '%s' with dims ", start->name);
      else put(&o, ": a graph input with dims ");
      put_shape(&o, &start->t);
      put(&o, "; bind them with --shape %s=DIMS", start->name);
    } else {
      if (hops) put(&o, ": it follows from '%s', which has no producer", start->name);
      else put(&o, ": it has no producer");
    }
    return;
  }
  if (hops) {
    put(&o, ": it follows from '%s' ", start->name);
    put_shape(&o, &start->t);
    put(&o, " of node '%s' (%s)", sp->name, gpuc_op_name(sp));
  }
  int k = unknown_data_input(g, sp);
  if (k < 0) {
    put(&o, hops ? ", whose inputs are all known" : ": its inputs are all known");
    return;
  }
  put(&o, hops ? ", whose input %d comes from " : ": its input %d comes from ", k);
  data_chain(g, sp->in[k], &o);
}
