/* gen_hostile OUTDIR: write the hostile-model corpus.
 *
 * OUTDIR/models/ gets one .onnx per case plus cases.txt, one line per case:
 *   <file>\t<kind>\t<expected message fragment, may be empty>
 * kind "bad":    gpuc inspect and gpuc run --cpu must both fail cleanly;
 *      "runbad": gpuc run must fail cleanly, inspect may accept the model;
 *      "clean":  either outcome is acceptable (ONNX leaves the result
 *                undefined, e.g. integer division by zero) as long as it
 *                is clean: exit 0, or a one-line error and exit 1;
 *      "ok":     a valid model (positive control), both must succeed.
 * OUTDIR/outside.bin lies outside the model folder on purpose: external
 * data cases try to reach it by '..', by symlinks, and by absolute paths.
 *
 * Models are built with the protobuf-c structs and packed, except where the
 * wire format itself must be broken (truncation, garbage, bad framing) or
 * where the nesting is too deep for protobuf-c's recursive packer (those
 * are written iteratively as raw bytes). */
#include "onnx.pb-c.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- a pool so every model's allocations are freed together ---- */
static void **pool;
static size_t npool, cappool;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gen_hostile: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static void *P(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) die("out of memory");
  if (npool == cappool) {
    cappool = cappool ? cappool * 2 : 1024;
    void **np = realloc(pool, cappool * sizeof *np);
    if (!np) die("out of memory");
    pool = np;
  }
  pool[npool++] = p;
  return p;
}

static char *S(const char *s) {
  size_t n = strlen(s);
  char *p = P(n + 1);
  memcpy(p, s, n);
  return p;
}

static void pool_reset(void) {
  for (size_t i = 0; i < npool; i++) free(pool[i]);
  npool = 0;
}

/* Append to a protobuf-c repeated field (pointer array + count). Capacity
 * doubles at powers of two, so 100k appends stay linear. */
static void push_ptr(void ***arr, size_t *n, void *item) {
  size_t k = *n;
  if (k == 0 || (k & (k - 1)) == 0) {
    void **na = P(sizeof(void *) * (k ? 2 * k : 1));
    if (k) memcpy(na, *arr, sizeof(void *) * k);
    *arr = na;
  }
  (*arr)[k] = item;
  *n = k + 1;
}
#define PUSH(arr, n, item) push_ptr((void ***)&(arr), &(n), (item))

/* "a b ~" -> {"a", "b", ""}: space-separated names, '~' for an empty name
 * (an absent optional input or output). */
static void names(const char *list, char ***arr, size_t *n) {
  const char *p = list;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *q = p;
    while (*q && *q != ' ') q++;
    char *s = P((size_t)(q - p) + 1);
    if (!(q - p == 1 && *p == '~')) memcpy(s, p, (size_t)(q - p));
    PUSH(*arr, *n, s);
    p = q;
  }
}

/* ---- message builders ---- */
typedef Onnx__ModelProto Model;
typedef Onnx__GraphProto Graph;
typedef Onnx__NodeProto Node;
typedef Onnx__TensorProto Tensor;
typedef Onnx__ValueInfoProto VI;
typedef Onnx__AttributeProto Attr;

enum {
  FLOAT = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
  INT32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
  INT64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
  STRING = ONNX__TENSOR_PROTO__DATA_TYPE__STRING,
};

/* DIMS(2, 3) expands to "rank, dims" arguments */
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define SCALAR 0, NULL

static Graph *graph(void) {
  Graph *g = P(sizeof *g);
  onnx__graph_proto__init(g);
  g->name = S("g");
  return g;
}

static Node *node(Graph *g, const char *op, const char *ins, const char *outs) {
  Node *n = P(sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = S(op);
  names(ins, &n->input, &n->n_input);
  names(outs, &n->output, &n->n_output);
  if (g) PUSH(g->node, g->n_node, n);
  return n;
}

static Tensor *tensor(const char *name, int32_t dt, int rank, const int64_t *dims) {
  Tensor *t = P(sizeof *t);
  onnx__tensor_proto__init(t);
  if (name) t->name = S(name);
  t->has_data_type = 1;
  t->data_type = dt;
  t->n_dims = (size_t)rank;
  t->dims = P(sizeof(int64_t) * (size_t)(rank ? rank : 1));
  if (rank) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  return t;
}

static void raw(Tensor *t, const void *data, size_t len) {
  t->has_raw_data = 1;
  t->raw_data.len = len;
  t->raw_data.data = P(len);
  if (len) memcpy(t->raw_data.data, data, len);
}

static int64_t numel_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* f32 tensor with raw data 0.5, 1.5, ... (or the given values) */
static Tensor *f32(const char *name, int rank, const int64_t *dims, const float *v) {
  Tensor *t = tensor(name, FLOAT, rank, dims);
  int64_t n = numel_of(rank, dims);
  float *d = P(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) d[i] = v ? v[i] : (float)i + 0.5f;
  raw(t, d, sizeof(float) * (size_t)n);
  return t;
}

static Tensor *i64(const char *name, int rank, const int64_t *dims, const int64_t *v) {
  Tensor *t = tensor(name, INT64, rank, dims);
  int64_t n = numel_of(rank, dims);
  t->n_int64_data = (size_t)n;
  t->int64_data = P(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (n) memcpy(t->int64_data, v, sizeof(int64_t) * (size_t)n);
  return t;
}

static Tensor *i32(const char *name, int rank, const int64_t *dims, const int32_t *v) {
  Tensor *t = tensor(name, INT32, rank, dims);
  int64_t n = numel_of(rank, dims);
  t->n_int32_data = (size_t)n;
  t->int32_data = P(sizeof(int32_t) * (size_t)(n ? n : 1));
  if (n) memcpy(t->int32_data, v, sizeof(int32_t) * (size_t)n);
  return t;
}

static Tensor *init(Graph *g, Tensor *t) {
  PUSH(g->initializer, g->n_initializer, t);
  return t;
}

/* rank < 0: no shape at all */
static VI *vi(const char *name, int32_t elem, int rank, const int64_t *dims) {
  VI *v = P(sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = S(name);
  Onnx__TypeProto *tp = P(sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor *tt = P(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  if (rank >= 0) {
    tt->shape = P(sizeof *tt->shape);
    onnx__tensor_shape_proto__init(tt->shape);
    for (int i = 0; i < rank; i++) {
      Onnx__TensorShapeProto__Dimension *d = P(sizeof *d);
      onnx__tensor_shape_proto__dimension__init(d);
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
      PUSH(tt->shape->dim, tt->shape->n_dim, d);
    }
  }
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->type = tp;
  return v;
}

static void input(Graph *g, VI *v) { PUSH(g->input, g->n_input, v); }
static void output(Graph *g, VI *v) { PUSH(g->output, g->n_output, v); }
/* an output by name only: gpuc takes its type from the producer */
static void out_name(Graph *g, const char *name) {
  VI *v = P(sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = S(name);
  output(g, v);
}

static Attr *attr(Node *n, const char *name, Onnx__AttributeProto__AttributeType type) {
  Attr *a = P(sizeof *a);
  onnx__attribute_proto__init(a);
  if (name) a->name = S(name);
  a->has_type = 1;
  a->type = type;
  PUSH(n->attribute, n->n_attribute, a);
  return a;
}
static void attr_i(Node *n, const char *name, int64_t v) {
  Attr *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}
static void attr_ints(Node *n, const char *name, int count, const int64_t *v) {
  Attr *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = (size_t)count;
  a->ints = P(sizeof(int64_t) * (size_t)(count ? count : 1));
  if (count) memcpy(a->ints, v, sizeof(int64_t) * (size_t)count);
}
static void attr_s(Node *n, const char *name, const void *s, size_t len) {
  Attr *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.len = len;
  a->s.data = P(len);
  if (len) memcpy(a->s.data, s, len);
}
static void attr_t(Node *n, const char *name, Tensor *t) {
  attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}
static void attr_g(Node *n, const char *name, Graph *g) {
  attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = g;
}

static void opset(Model *m, const char *domain, int64_t version) {
  Onnx__OperatorSetIdProto *o = P(sizeof *o);
  onnx__operator_set_id_proto__init(o);
  o->domain = S(domain);
  o->has_version = 1;
  o->version = version;
  PUSH(m->opset_import, m->n_opset_import, o);
}

static Model *model(Graph *g, int64_t version) {
  Model *m = P(sizeof *m);
  onnx__model_proto__init(m);
  m->has_ir_version = 1;
  m->ir_version = 8;
  m->producer_name = S("gen_hostile");
  opset(m, "", version);
  m->graph = g;
  return m;
}

/* ---- output ---- */
static char models_dir[4096];
static FILE *manifest;
static int ncases;

static void path_of(char *buf, size_t n, const char *file) {
  if (snprintf(buf, n, "%s/%s", models_dir, file) >= (int)n) die("path too long");
}

static void write_file(const char *file, const void *buf, size_t len) {
  char path[4352];
  path_of(path, sizeof path, file);
  FILE *f = fopen(path, "wb");
  if (!f) die("%s: %s", path, strerror(errno));
  if (len && fwrite(buf, 1, len, f) != len) die("%s: write failed", path);
  if (fclose(f)) die("%s: write failed", path);
}

static void record(const char *name, const char *kind, const char *expect) {
  fprintf(manifest, "%s.onnx\t%s\t%s\n", name, kind, expect);
  ncases++;
}

static void emit_bytes(const char *name, const char *kind, const char *expect, const void *buf,
                       size_t len) {
  char file[512];
  snprintf(file, sizeof file, "%s.onnx", name);
  write_file(file, buf, len);
  record(name, kind, expect);
  pool_reset();
}

static uint8_t *pack(const Model *m, size_t *len) {
  *len = onnx__model_proto__get_packed_size(m);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (!buf) die("out of memory");
  if (onnx__model_proto__pack(m, buf) != *len) die("pack size mismatch");
  return buf;
}

static void emit(const char *name, const char *kind, const char *expect, const Model *m) {
  size_t len;
  uint8_t *buf = pack(m, &len);
  emit_bytes(name, kind, expect, buf, len);
  free(buf);
}
#define BAD(name, expect, m) emit(name, "bad", expect, m)
#define OK(name, m) emit(name, "ok", "", m)

/* ---- raw wire format, for what protobuf-c cannot or must not write ---- */
typedef struct { uint8_t *b; size_t n, cap; } Buf;

static void put(Buf *b, const void *p, size_t n) {
  if (n == 0) return;  /* p may be NULL then (an empty Buf) */
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    uint8_t *nb = realloc(b->b, cap);
    if (!nb) die("out of memory");
    b->b = nb;
    b->cap = cap;
  }
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void put_varint(Buf *b, uint64_t v) {
  uint8_t tmp[10];
  int k = 0;
  do { tmp[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
  put(b, tmp, (size_t)k);
}
static size_t varint_len(uint64_t v) {
  size_t k = 1;
  while (v > 0x7f) { v >>= 7; k++; }
  return k;
}
static void put_key(Buf *b, uint32_t field, uint32_t wt) { put_varint(b, (uint64_t)field << 3 | wt); }
static void put_str(Buf *b, uint32_t field, const char *s) {
  put_key(b, field, 2);
  put_varint(b, strlen(s));
  put(b, s, strlen(s));
}

/* One level of a deep nesting: `pre` (sibling fields written before the
 * child), then the child message under field `field`. */
typedef struct { Buf pre; uint32_t field; } Level;

/* Write levels[0] containing levels[1] containing ... containing `leaf`.
 * Lengths are computed innermost-first into an array, then the bytes are
 * written outermost-first, so the cost is linear in the depth (wrapping a
 * buffer level by level would be quadratic, and protobuf-c's packer would
 * recurse once per level). */
static void nest(Buf *out, Level *lv, size_t nlv, const Buf *leaf) {
  size_t *len = malloc(sizeof(size_t) * (nlv + 1));
  if (!len) die("out of memory");
  len[nlv] = leaf->n;  /* len[i]: content length of the child of level i-1 */
  for (size_t i = nlv; i-- > 0;)
    len[i] = lv[i].pre.n + varint_len((uint64_t)lv[i].field << 3 | 2) + varint_len(len[i + 1]) +
             len[i + 1];
  for (size_t i = 0; i < nlv; i++) {
    put(out, lv[i].pre.b, lv[i].pre.n);
    put_key(out, lv[i].field, 2);
    put_varint(out, len[i + 1]);
  }
  put(out, leaf->b, leaf->n);
  free(len);
}

static void model_header(Buf *b) {
  put_key(b, 1, 0);   /* ir_version 8 */
  put_varint(b, 8);
  put_key(b, 8, 2);   /* opset_import { version: 17 } */
  put_varint(b, 2);
  put_key(b, 2, 0);
  put_varint(b, 17);
}

/* A graph nested `depth` times through If.then_branch attributes, or a
 * TypeProto nested `depth` times (sequence or map), or graphs nested via
 * training_info. */
enum { DEEP_GRAPH, DEEP_SEQ, DEEP_MAP, DEEP_TRAINING, DEEP_OPTIONAL, DEEP_FUNCTION };

static void emit_deep(const char *name, const char *kind, const char *expect, int how, long depth) {
  size_t per = how == DEEP_GRAPH || how == DEEP_TRAINING || how == DEEP_FUNCTION ? 3 : 2;
  size_t nlv = 5 + (size_t)depth * per;
  Level *lv = calloc(nlv, sizeof *lv);
  if (!lv) die("out of memory");
  size_t k = 0;
  model_header(&lv[k].pre);
  Buf leaf = {0};
  if (how == DEEP_GRAPH || how == DEEP_TRAINING || how == DEEP_FUNCTION) {
    if (how == DEEP_GRAPH) {
      lv[k++].field = 7;                          /* Model.graph */
    } else if (how == DEEP_FUNCTION) {
      lv[k++].field = 25;                         /* Model.functions */
      put_str(&lv[k].pre, 1, "f");                /* Function.name */
      lv[k++].field = 7;                          /* Function.node */
      put_str(&lv[k].pre, 4, "If");               /* Node.op_type */
      lv[k++].field = 5;                          /* Node.attribute */
      put_str(&lv[k].pre, 1, "then_branch");      /* Attribute.name */
      put_key(&lv[k].pre, 20, 0);                 /* Attribute.type = GRAPH */
      put_varint(&lv[k].pre, 5);
      lv[k++].field = 6;                          /* Attribute.g */
    } else {
      lv[k++].field = 20;                         /* Model.training_info */
      lv[k++].field = 1;                          /* TrainingInfo.initialization */
    }
    for (long d = 0; d < depth; d++) {
      lv[k++].field = 1;                          /* Graph.node */
      put_str(&lv[k].pre, 4, "If");               /* Node.op_type */
      lv[k++].field = 5;                          /* Node.attribute */
      put_str(&lv[k].pre, 1, "then_branch");      /* Attribute.name */
      put_key(&lv[k].pre, 20, 0);                 /* Attribute.type = GRAPH */
      put_varint(&lv[k].pre, 5);
      lv[k++].field = 6;                          /* Attribute.g */
    }
    put_str(&leaf, 2, "innermost");               /* Graph.name */
  } else {
    lv[k++].field = 7;                            /* Model.graph */
    lv[k++].field = 11;                           /* Graph.input */
    put_str(&lv[k].pre, 1, "x");                  /* ValueInfo.name */
    lv[k++].field = 2;                            /* ValueInfo.type */
    for (long d = 0; d < depth; d++) {
      if (how == DEEP_SEQ) {
        lv[k++].field = 4;                        /* TypeProto.sequence_type */
        lv[k++].field = 1;                        /* Sequence.elem_type */
      } else if (how == DEEP_OPTIONAL) {
        lv[k++].field = 9;                        /* TypeProto.optional_type */
        lv[k++].field = 1;                        /* Optional.elem_type */
      } else {
        lv[k++].field = 5;                        /* TypeProto.map_type */
        put_key(&lv[k].pre, 1, 0);                /* Map.key_type = INT64 */
        put_varint(&lv[k].pre, 7);
        lv[k++].field = 2;                        /* Map.value_type */
      }
    }
    /* innermost TypeProto: tensor_type { elem_type: FLOAT } */
    put_key(&leaf, 1, 2);
    put_varint(&leaf, 2);
    put_key(&leaf, 1, 0);
    put_varint(&leaf, 1);
  }
  Buf out = {0};
  nest(&out, lv, k, &leaf);
  emit_bytes(name, kind, expect, out.b, out.n);
  for (size_t i = 0; i < nlv; i++) free(lv[i].pre.b);
  free(lv);
  free(leaf.b);
  free(out.b);
}

/* ---- the cases ---- */

/* x[2,3] + y[2,3] -> z: the base of several cases */
static Model *add_model(void) {
  Graph *g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  input(g, vi("y", FLOAT, DIMS(2, 3)));
  node(g, "Add", "x y", "z");
  output(g, vi("z", FLOAT, DIMS(2, 3)));
  return model(g, 17);
}

/* x[2,3] -> Relu -> r; one initializer w[4] whose tensor `t` the caller
 * shapes (the initializer cases only differ in w). */
static Model *init_model(Tensor *w) {
  Graph *g = graph();
  w->name = S("w");
  init(g, w);
  out_name(g, "w");
  return model(g, 17);
}

static void valid_controls(void) {
  OK("valid_add", add_model());

  Graph *g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  init(g, f32("W", DIMS(3, 4), NULL));
  node(g, "Relu", "x", "r");
  node(g, "MatMul", "r W", "y");
  output(g, vi("y", FLOAT, DIMS(2, 4)));
  OK("valid_relu_matmul", model(g, 17));

  /* no nodes at all: the output is an initializer */
  OK("valid_no_nodes", init_model(f32(NULL, DIMS(3), NULL)));

  /* Constant nodes become constant values (the node is dropped) */
  g = graph();
  attr_t(node(g, "Constant", "", "c"), "value", f32(NULL, DIMS(2, 3), NULL));
  out_name(g, "c");
  OK("valid_constant", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  node(g, "Add", "x c", "y");
  attr_t(node(g, "Constant", "", "c"), "value", f32(NULL, DIMS(2, 3), NULL));
  output(g, vi("y", FLOAT, DIMS(2, 3)));
  OK("valid_constant_add", model(g, 17));

  /* IR v3 style: initializers also listed as graph inputs */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  input(g, vi("b", FLOAT, DIMS(3)));
  init(g, f32("b", DIMS(3), NULL));
  node(g, "Add", "x b", "y");
  output(g, vi("y", FLOAT, DIMS(2, 3)));
  Model *m = model(g, 7);
  m->ir_version = 3;
  OK("valid_ir3_initializer_inputs", m);

  /* external data inside the model folder, at an offset */
  Tensor *t = tensor(NULL, FLOAT, DIMS(4));
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *kv[][2] = {{"location", "weights.bin"}, {"offset", "16"}, {"length", "16"}};
  for (size_t i = 0; i < 3; i++) {
    Onnx__StringStringEntryProto *e = P(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = S(kv[i][0]);
    e->value = S(kv[i][1]);
    PUSH(t->external_data, t->n_external_data, e);
  }
  OK("valid_external_data", init_model(t));

  /* attributes an op ignores may be empty: an empty string and an empty
   * list (protobuf-c hands these over as NULL pointers of length 0) */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  Node *n = node(g, "Relu", "x", "y");
  attr_s(n, "note", "", 0);
  attr_ints(n, "unused", 0, NULL);
  output(g, vi("y", FLOAT, DIMS(2, 3)));
  OK("valid_empty_attributes", model(g, 17));

  /* an unused output in the middle keeps its slot: Split still makes
   * three parts, and its kernel must cope with the absent one */
  g = graph();
  init(g, f32("x", DIMS(6), NULL));
  node(g, "Split", "x", "a ~ c");
  out_name(g, "a");
  out_name(g, "c");
  OK("valid_split_unused_output", model(g, 17));

  /* 100k graph outputs: anything quadratic in the output count shows */
  g = graph();
  for (int i = 0; i < 100000; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "c%d", i);
    init(g, f32(nm, SCALAR, NULL));
    out_name(g, nm);
  }
  OK("valid_many_outputs", model(g, 17));
}

static void broken_files(void) {
  size_t len;
  uint8_t *buf = pack(add_model(), &len);
  pool_reset();
  emit_bytes("truncated", "bad", "truncated or corrupt", buf, len / 2);
  free(buf);

  uint8_t garbage[4096];
  uint64_t s = 0x243f6a8885a308d3ull;  /* fixed seed: the same corpus every run */
  for (size_t i = 0; i < sizeof garbage; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    garbage[i] = (uint8_t)(s >> 56);
  }
  emit_bytes("garbage", "bad", "not a valid ONNX", garbage, sizeof garbage);
  emit_bytes("empty", "bad", "empty file", "", 0);

  /* a length prefix claiming 2^40 bytes */
  Buf b = {0};
  model_header(&b);
  put_key(&b, 7, 2);
  put_varint(&b, (uint64_t)1 << 40);
  put(&b, "\x0a\x00", 2);
  emit_bytes("huge_length_prefix", "bad", "truncated or corrupt", b.b, b.n);
  b.n = 0;
  /* a varint that never ends */
  put(&b, "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 13);
  emit_bytes("endless_varint", "bad", "truncated or corrupt", b.b, b.n);
  b.n = 0;
  /* the graph field encoded as a varint: framing fine, schema wrong */
  model_header(&b);
  put_key(&b, 7, 0);
  put_varint(&b, 1);
  emit_bytes("wrong_wire_type", "bad", "not a valid ONNX", b.b, b.n);
  b.n = 0;
  /* a deprecated group (wire type 3) */
  model_header(&b);
  put_key(&b, 7, 3);
  emit_bytes("group_wire_type", "bad", "not a valid ONNX", b.b, b.n);
  b.n = 0;
  /* field number 0 is reserved */
  put(&b, "\x02\x00", 2);
  emit_bytes("field_zero", "bad", "not a valid ONNX", b.b, b.n);
  free(b.b);

  /* a TensorProto written where a ModelProto belongs */
  Tensor *t = f32("w", DIMS(2, 2), NULL);
  len = onnx__tensor_proto__get_packed_size(t);
  buf = malloc(len);
  if (!buf) die("out of memory");
  onnx__tensor_proto__pack(t, buf);
  emit_bytes("tensor_not_model", "bad", "", buf, len);
  free(buf);

  /* not a regular file: a FIFO (opening it for reading must not block) and
   * a directory */
  char path[4352];
  path_of(path, sizeof path, "fifo_model.onnx");
  if (mkfifo(path, 0644)) die("mkfifo %s: %s", path, strerror(errno));
  record("fifo_model", "bad", "not a regular file");
  path_of(path, sizeof path, "directory_model.onnx");
  if (mkdir(path, 0755)) die("mkdir %s: %s", path, strerror(errno));
  record("directory_model", "bad", "not a regular file");
}

static void model_level(void) {
  Model *m = add_model();
  m->graph = NULL;
  BAD("no_graph", "has no graph", m);

  m = add_model();
  m->has_ir_version = 0;
  BAD("no_ir_version", "ir_version", m);

  BAD("opset_0", "opset 0", model(add_model()->graph, 0));
  BAD("opset_1000", "opset 1000", model(add_model()->graph, 1000));
  BAD("opset_negative", "opset -5", model(add_model()->graph, -5));
  m = add_model();
  opset(m, "ai.onnx", 999);  /* a second default-domain entry overriding the first */
  BAD("opset_conflicting", "opset 999", m);

  Graph *g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  BAD("no_outputs", "no outputs", model(g, 17));
}

static void tensors(void) {
  float v[8] = {0};
  Tensor *t = tensor(NULL, FLOAT, DIMS(4));
  raw(t, v, 8);
  BAD("raw_data_short", "raw_data has 8 bytes", init_model(t));
  t = tensor(NULL, FLOAT, DIMS(4));
  raw(t, v, 32);
  BAD("raw_data_long", "raw_data has 32 bytes", init_model(t));
  t = tensor(NULL, FLOAT, DIMS(2, -3));
  raw(t, v, 24);
  BAD("negative_dim", "negative dim -3", init_model(t));
  t = tensor(NULL, FLOAT, DIMS((int64_t)1 << 32, (int64_t)1 << 32));
  raw(t, v, 4);
  BAD("dims_overflow", "overflows", init_model(t));
  /* zero elements, but the other dims multiply past int64: any stride
   * computed from this shape would overflow */
  t = tensor(NULL, FLOAT, DIMS(0, (int64_t)1 << 62, 4));
  BAD("zero_dim_huge_strides", "overflows", init_model(t));
  t = tensor(NULL, FLOAT, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1));
  raw(t, v, 4);
  BAD("rank_9", "rank 9", init_model(t));
  t = tensor(NULL, 99, DIMS(2));
  raw(t, v, 8);
  BAD("elem_type_99", "element type", init_model(t));
  t = tensor(NULL, 0, DIMS(2));
  raw(t, v, 8);
  BAD("elem_type_undefined", "UNDEFINED", init_model(t));
  t = tensor(NULL, STRING, DIMS(2));
  t->n_string_data = 2;
  t->string_data = P(2 * sizeof *t->string_data);
  t->string_data[0] = (ProtobufCBinaryData){3, (uint8_t *)S("abc")};
  t->string_data[1] = (ProtobufCBinaryData){2, (uint8_t *)S("de")};
  BAD("string_tensor", "STRING", init_model(t));
  t = tensor(NULL, ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64, DIMS(2));
  raw(t, v, 16);
  BAD("complex_tensor", "COMPLEX64", init_model(t));
  t = tensor(NULL, FLOAT, DIMS(2, 3));
  t->n_float_data = 3;
  t->float_data = P(3 * sizeof(float));
  BAD("float_data_count", "has 3 values", init_model(t));
  t = tensor(NULL, FLOAT, DIMS(2, 3));
  BAD("no_data", "has no data", init_model(t));
  /* 4 TB declared, no data: must fail before allocating */
  t = tensor(NULL, FLOAT, DIMS((int64_t)1 << 20, (int64_t)1 << 20));
  BAD("huge_initializer", "limit", init_model(t));
  t = f32(NULL, DIMS(4), NULL);
  t->segment = P(sizeof *t->segment);
  onnx__tensor_proto__segment__init(t->segment);
  BAD("segmented_tensor", "segment", init_model(t));

  Graph *g = graph();
  init(g, f32(NULL, DIMS(2), NULL));
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("initializer_no_name", "no name", model(g, 17));

  g = graph();
  Onnx__SparseTensorProto *sp = P(sizeof *sp);
  onnx__sparse_tensor_proto__init(sp);
  sp->values = f32("s", DIMS(1), NULL);
  sp->indices = i64(NULL, DIMS(1), (const int64_t[]){0});
  sp->n_dims = 1;
  sp->dims = P(sizeof(int64_t));
  sp->dims[0] = 4;
  PUSH(g->sparse_initializer, g->n_sparse_initializer, sp);
  init(g, f32("w", DIMS(2), NULL));
  out_name(g, "w");
  BAD("sparse_initializer", "sparse", model(g, 17));
}

/* a chain x -> Relu -> ... for the graph-structure cases */
static void structure(void) {
  Graph *g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Add", "x q", "p");
  node(g, "Relu", "p", "q");
  out_name(g, "q");
  BAD("cycle", "cycle", model(g, 17));

  g = graph();
  node(g, "Relu", "y", "y");
  out_name(g, "y");
  BAD("self_loop", "cycle", model(g, 17));

  /* 100k nodes in one ring: cycle detection must stay linear */
  g = graph();
  for (int i = 0; i < 100000; i++) {
    char in[32], out[32];
    snprintf(in, sizeof in, "v%d", (i + 99999) % 100000);
    snprintf(out, sizeof out, "v%d", i);
    node(g, "Relu", in, out);
  }
  out_name(g, "v0");
  BAD("long_cycle", "cycle", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Add", "x nowhere", "y");
  out_name(g, "y");
  BAD("dangling_input", "'nowhere' is not produced", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  node(g, "Neg", "x", "y");
  out_name(g, "y");
  BAD("duplicate_node_outputs", "defined twice", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  init(g, f32("y", DIMS(2), NULL));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("initializer_named_like_output", "defined twice", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "x");
  out_name(g, "x");
  BAD("input_named_like_output", "defined twice", model(g, 17));

  g = graph();
  init(g, f32("w", DIMS(2), NULL));
  init(g, f32("w", DIMS(3), NULL));
  out_name(g, "w");
  BAD("duplicate_initializers", "initializer 'w': the name 'w' is defined twice", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("duplicate_graph_inputs", "listed twice", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  out_name(g, "ghost");
  BAD("output_never_produced", "'ghost' is never produced", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y");
  out_name(g, "");
  BAD("output_without_name", "has no name", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "");
  node(g, "Neg", "x", "y");
  out_name(g, "y");
  BAD("node_without_outputs", "0 outputs", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "~");
  node(g, "Neg", "x", "y");
  out_name(g, "y");
  BAD("node_output_empty_name", "output 0 is required", model(g, 17));

  /* a required input left empty (only trailing optional inputs may be) */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Add", "~ x", "y");
  out_name(g, "y");
  BAD("absent_required_input", "input 0", model(g, 17));

  /* a required output left empty: Dropout's output 0 */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Dropout", "x", "~ mask");
  out_name(g, "mask");
  BAD("absent_required_output", "output 0", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x x x", "y");
  out_name(g, "y");
  BAD("too_many_inputs", "has 3 inputs", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y z");
  out_name(g, "y");
  BAD("too_many_outputs", "has 2 outputs", model(g, 17));

  /* a variadic op past the per-node input limit */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  Node *n = node(g, "Sum", "", "y");
  for (int i = 0; i < 5000; i++) PUSH(n->input, n->n_input, S("x"));
  out_name(g, "y");
  BAD("too_many_inputs_variadic", "has 5000 inputs", model(g, 17));
}

static void ops_and_attributes(void) {
  Graph *g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "FooBar", "x", "y");
  out_name(g, "y");
  BAD("unknown_op", "unsupported op 'FooBar'", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "", "x", "y");
  out_name(g, "y");
  BAD("empty_op_type", "unsupported op", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Relu", "x", "y")->domain = S("com.evil");
  out_name(g, "y");
  Model *m = model(g, 17);
  opset(m, "com.evil", 1);
  BAD("unknown_domain", "domain 'com.evil'", m);

  /* control flow: If with two subgraphs */
  g = graph();
  input(g, vi("c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, SCALAR));
  input(g, vi("x", FLOAT, DIMS(2)));
  Node *n = node(g, "If", "c", "y");
  Graph *then_g = graph(), *else_g = graph();
  node(then_g, "Relu", "x", "t");
  out_name(then_g, "t");
  node(else_g, "Neg", "x", "e");
  out_name(else_g, "e");
  attr_g(n, "then_branch", then_g);
  attr_g(n, "else_branch", else_g);
  out_name(g, "y");
  BAD("if_subgraphs", "unsupported op 'If'", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  n = node(g, "Loop", "~ ~ x", "y");
  Graph *body = graph();
  node(body, "Identity", "x", "x2");
  out_name(body, "x2");
  attr_g(n, "body", body);
  out_name(g, "y");
  BAD("loop_subgraph", "unsupported op 'Loop'", model(g, 17));

  /* a graph attribute on an op that has none */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  body = graph();
  node(body, "Neg", "x", "z");
  out_name(body, "z");
  attr_g(node(g, "Relu", "x", "y"), "body", body);
  out_name(g, "y");
  BAD("graph_attribute_on_relu", "not supported", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  attr_i(node(g, "Relu", "x", "y"), NULL, 1);
  out_name(g, "y");
  BAD("attribute_without_name", "without a name", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  n = node(g, "LeakyRelu", "x", "y");
  attr_i(n, "alpha", 1);
  attr_i(n, "alpha", 2);
  out_name(g, "y");
  BAD("attribute_twice", "given twice", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  attr_s(node(g, "Relu", "x", "y"), "mode", "a\0b", 3);
  out_name(g, "y");
  BAD("attribute_nul_byte", "NUL byte", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  n = node(g, "LeakyRelu", "x", "y");
  attr_i(n, "alpha", 1);
  n->attribute[0]->ref_attr_name = S("outer_alpha");
  out_name(g, "y");
  BAD("attribute_ref", "function attribute", model(g, 17));

  /* 100k attributes on one node, the last repeating the first: duplicate
   * detection must not be quadratic */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  n = node(g, "Relu", "x", "y");
  for (int i = 0; i < 100000; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "a%d", i);
    attr_i(n, nm, i);
  }
  attr_i(n, "a0", 0);
  out_name(g, "y");
  BAD("many_attributes", "'a0' given twice", model(g, 17));

  /* empty STRING and INTS attributes reach the frontend as NULL pointers
   * with length 0; the node's input is dangling so the case fails after
   * the attributes are converted, whatever Relu's kernel does */
  g = graph();
  n = node(g, "Relu", "nowhere", "y");
  attr_s(n, "note", "", 0);
  attr_ints(n, "axes", 0, NULL);
  n = node(g, "Relu", "y", "z");
  attr(n, "f", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  attr(n, "s", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  out_name(g, "z");
  BAD("empty_attributes_dangling", "'nowhere' is not produced", model(g, 17));

  g = graph();
  n = node(g, "Constant", "", "c");
  attr_t(n, "value", f32(NULL, DIMS(2), NULL));
  attr_i(n, "value_int", 3);
  out_name(g, "c");
  BAD("constant_two_values", "exactly one", model(g, 17));

  g = graph();
  attr_s(node(g, "Constant", "", "c"), "value_string", "hi", 2);
  out_name(g, "c");
  BAD("constant_value_string", "not supported", model(g, 17));

  /* a good Constant, a node carrying a tensor attribute, then a bad
   * Constant: the failure must not free that tensor twice */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  attr_t(node(g, "Constant", "", "c1"), "value", f32(NULL, DIMS(2), NULL));
  attr_t(node(g, "Relu", "x", "y"), "junk", f32(NULL, DIMS(2), NULL));
  n = node(g, "Constant", "", "c2");
  attr_i(n, "value_int", 1);
  attr_i(n, "value_float", 2);
  out_name(g, "y");
  BAD("constant_bad_after_tensor_attribute", "exactly one", model(g, 17));

  /* control characters in names must not split the one-line message */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  node(g, "Foo\nBar", "x", "y")->name = S("evil\nnode\r\x1b[2J");
  out_name(g, "y");
  BAD("newline_in_names", "unsupported op", model(g, 17));

  /* a 100 KB node name: the message is truncated, the file name stays */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  n = node(g, "FooBar", "x", "y");
  n->name = P(100001);
  memset(n->name, 'n', 100000);
  out_name(g, "y");
  BAD("huge_node_name", "node 'nnnn", model(g, 17));

  /* an attribute type outside the enum */
  g = graph();
  input(g, vi("x", FLOAT, DIMS(2)));
  attr(node(g, "Relu", "x", "y"), "odd", (Onnx__AttributeProto__AttributeType)99);
  out_name(g, "y");
  BAD("attribute_type_99", "type 99", model(g, 17));

  g = graph();
  Attr *a = attr(node(g, "Constant", "", "c"), "sparse_value",
                 ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR);
  a->sparse_tensor = P(sizeof *a->sparse_tensor);
  onnx__sparse_tensor_proto__init(a->sparse_tensor);
  a->sparse_tensor->values = f32(NULL, DIMS(1), NULL);
  a->sparse_tensor->indices = i64(NULL, DIMS(1), (const int64_t[]){0});
  out_name(g, "c");
  BAD("constant_sparse_value", "not supported", model(g, 17));
}

static void value_types(void) {
  Graph *g = graph();
  input(g, vi("x", STRING, DIMS(2)));
  node(g, "Identity", "x", "y");
  out_name(g, "y");
  BAD("string_input", "STRING", model(g, 17));

  g = graph();
  VI *v = vi("x", FLOAT, DIMS(2));
  Onnx__TypeProto *inner = v->type;
  Onnx__TypeProto *outer = P(sizeof *outer);
  onnx__type_proto__init(outer);
  outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  outer->sequence_type = P(sizeof *outer->sequence_type);
  onnx__type_proto__sequence__init(outer->sequence_type);
  outer->sequence_type->elem_type = inner;
  v->type = outer;
  input(g, v);
  node(g, "Identity", "x", "y");
  out_name(g, "y");
  BAD("sequence_input", "only tensor inputs", model(g, 17));

  g = graph();
  VI *nt = vi("x", FLOAT, DIMS(2));
  nt->type = NULL;
  input(g, nt);
  node(g, "Identity", "x", "y");
  out_name(g, "y");
  BAD("input_without_type", "only tensor inputs", model(g, 17));

  g = graph();
  v = vi("x", FLOAT, DIMS(2));
  v->type->tensor_type->has_elem_type = 0;
  input(g, v);
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_without_elem_type", "UNDEFINED", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, -1)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_negative_dim", "negative dim", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_rank_9", "rank 9", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS((int64_t)1 << 40, (int64_t)1 << 40)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_dims_overflow", "overflows", model(g, 17));

  /* known dims that overflow even though one dim is symbolic */
  g = graph();
  v = vi("x", FLOAT, DIMS(1, (int64_t)1 << 40, (int64_t)1 << 40));
  v->type->tensor_type->shape->dim[0]->value_case =
      ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  v->type->tensor_type->shape->dim[0]->dim_param = S("N");
  input(g, v);
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_symbolic_dims_overflow", "overflows", model(g, 17));

  /* 4 TB input: no tensor that large is ever handled */
  g = graph();
  input(g, vi("x", FLOAT, DIMS((int64_t)1 << 20, (int64_t)1 << 20)));
  node(g, "Relu", "x", "y");
  out_name(g, "y");
  BAD("input_huge", "limit", model(g, 17));

  /* nested types shallow enough for the pre-scan: rejected as types */
  emit_deep("sequence_type_20_deep", "bad", "only tensor inputs", DEEP_SEQ, 20);
}

static void deep_nesting(void) {
  emit_deep("deep_graph_attributes_100k", "bad", "nested more than", DEEP_GRAPH, 100000);
  emit_deep("deep_sequence_type_100k", "bad", "nested more than", DEEP_SEQ, 100000);
  emit_deep("deep_map_type_100k", "bad", "nested more than", DEEP_MAP, 100000);
  emit_deep("deep_optional_type_100k", "bad", "nested more than", DEEP_OPTIONAL, 100000);
  emit_deep("deep_training_info_100k", "bad", "nested more than", DEEP_TRAINING, 100000);
  emit_deep("deep_function_100k", "bad", "nested more than", DEEP_FUNCTION, 100000);
  /* just past the limit, and If inside If a few levels (fine for the
   * pre-scan, refused as control flow) */
  emit_deep("deep_graph_attributes_22", "bad", "nested more than", DEEP_GRAPH, 22);
  emit_deep("nested_if_5", "bad", "unsupported op 'If'", DEEP_GRAPH, 5);
}

/* initializer w[4] f32 (16 bytes) from external data with these keys */
static Tensor *ext_tensor(const char *location, const char *offset, const char *length) {
  Tensor *t = tensor(NULL, FLOAT, DIMS(4));
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {location, offset, length};
  for (int i = 0; i < 3; i++) {
    if (!vals[i]) continue;
    Onnx__StringStringEntryProto *e = P(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = S(keys[i]);
    e->value = S(vals[i]);
    PUSH(t->external_data, t->n_external_data, e);
  }
  return t;
}

static void external_data(const char *outdir) {
  /* files the cases point at: 64 bytes each, so a read that escaped would
   * succeed and show */
  uint8_t data[64];
  for (int i = 0; i < 64; i++) data[i] = (uint8_t)i;
  write_file("weights.bin", data, sizeof data);
  char path[4352], target[4352];
  snprintf(path, sizeof path, "%s/outside.bin", outdir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, sizeof data, f) != sizeof data || fclose(f))
    die("%s: cannot write", path);
  path_of(path, sizeof path, "link_outside.bin");
  if (symlink("../outside.bin", path)) die("symlink %s: %s", path, strerror(errno));
  path_of(path, sizeof path, "link_inside.bin");
  if (symlink("weights.bin", path)) die("symlink %s: %s", path, strerror(errno));
  path_of(path, sizeof path, "dirlink");
  if (symlink("..", path)) die("symlink %s: %s", path, strerror(errno));
  path_of(path, sizeof path, "fifo.bin");
  if (mkfifo(path, 0644)) die("mkfifo %s: %s", path, strerror(errno));
  path_of(path, sizeof path, "subdir");
  if (mkdir(path, 0755)) die("mkdir %s: %s", path, strerror(errno));
  snprintf(target, sizeof target, "%s/outside.bin", outdir);

  BAD("ext_dotdot", "leaves the model's folder", init_model(ext_tensor("../outside.bin", NULL, NULL)));
  BAD("ext_dotdot_inner", "leaves the model's folder",
      init_model(ext_tensor("subdir/../../outside.bin", NULL, NULL)));
  BAD("ext_absolute_etc_passwd", "leaves the model's folder",
      init_model(ext_tensor("/etc/passwd", NULL, NULL)));
  BAD("ext_absolute_outside", "leaves the model's folder", init_model(ext_tensor(target, NULL, NULL)));
  BAD("ext_symlink_outside", "symbolic link", init_model(ext_tensor("link_outside.bin", NULL, NULL)));
  BAD("ext_symlink_inside", "symbolic link", init_model(ext_tensor("link_inside.bin", NULL, NULL)));
  BAD("ext_symlinked_folder", "leaves the model's folder",
      init_model(ext_tensor("dirlink/outside.bin", NULL, NULL)));
  BAD("ext_past_end", "past its end", init_model(ext_tensor("weights.bin", "56", NULL)));
  BAD("ext_offset_past_file", "past its end", init_model(ext_tensor("weights.bin", "4096", NULL)));
  BAD("ext_offset_int64_max", "past its end",
      init_model(ext_tensor("weights.bin", "9223372036854775807", NULL)));
  BAD("ext_offset_too_big", "not a non-negative integer",
      init_model(ext_tensor("weights.bin", "99999999999999999999", NULL)));
  BAD("ext_offset_negative", "not a non-negative integer",
      init_model(ext_tensor("weights.bin", "-16", NULL)));
  BAD("ext_offset_not_a_number", "not a non-negative integer",
      init_model(ext_tensor("weights.bin", "16abc", NULL)));
  BAD("ext_length_mismatch", "length 8", init_model(ext_tensor("weights.bin", NULL, "8")));
  BAD("ext_missing_file", "No such file", init_model(ext_tensor("nope.bin", NULL, NULL)));
  BAD("ext_no_location", "no location", init_model(ext_tensor(NULL, "0", NULL)));
  BAD("ext_empty_location", "no location", init_model(ext_tensor("", NULL, NULL)));
  BAD("ext_fifo", "not a regular file", init_model(ext_tensor("fifo.bin", NULL, NULL)));
  BAD("ext_directory", "not a regular file", init_model(ext_tensor("subdir", NULL, NULL)));

  Graph *g = graph();
  attr_t(node(g, "Constant", "", "c"), "value", ext_tensor("../outside.bin", NULL, NULL));
  out_name(g, "c");
  BAD("ext_in_constant", "leaves the model's folder", model(g, 17));
}

/* Cases whose failure comes from the ops' shape inference. */
static void shapes(void) {
  Graph *g = graph();
  input(g, vi("a", FLOAT, DIMS(2, 3)));
  input(g, vi("b", FLOAT, DIMS(4, 5)));
  node(g, "Add", "a b", "y");
  out_name(g, "y");
  BAD("add_shape_mismatch", "", model(g, 17));

  g = graph();
  input(g, vi("a", FLOAT, DIMS(2, 3)));
  input(g, vi("b", FLOAT, DIMS(4, 5)));
  node(g, "MatMul", "a b", "y");
  out_name(g, "y");
  BAD("matmul_shape_mismatch", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_ints(node(g, "Transpose", "x", "y"), "perm", DIMS(1, 0, 2));
  out_name(g, "y");
  BAD("transpose_perm_too_long", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_ints(node(g, "Transpose", "x", "y"), "perm", 0, NULL);
  out_name(g, "y");
  BAD("transpose_perm_empty", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_ints(node(g, "Transpose", "x", "y"), "perm", DIMS(0, 0));
  out_name(g, "y");
  BAD("transpose_perm_repeated", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_ints(node(g, "Transpose", "x", "y"), "perm", DIMS(0, 7));
  out_name(g, "y");
  BAD("transpose_perm_out_of_range", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(1, 1, 5, 5)));
  init(g, f32("w", DIMS(1, 1, 3, 3), NULL));
  attr_ints(node(g, "Conv", "x w", "y"), "kernel_shape", DIMS(3, 3, 3));
  out_name(g, "y");
  BAD("conv_kernel_shape_length", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(1, 1, 5, 5)));
  init(g, f32("w", DIMS(1, 1, 3, 3), NULL));
  attr_ints(node(g, "Conv", "x w", "y"), "pads", DIMS(1, 1, 1));
  out_name(g, "y");
  BAD("conv_pads_length", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(1, 1, 5, 5)));
  init(g, f32("w", DIMS(1, 1, 3, 3), NULL));
  attr_ints(node(g, "Conv", "x w", "y"), "strides", DIMS(0, 0));
  out_name(g, "y");
  BAD("conv_zero_stride", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_i(node(g, "Concat", "x x", "y"), "axis", 5);
  out_name(g, "y");
  BAD("concat_axis_out_of_range", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  attr_i(node(g, "Concat", "x x", "y"), "axis", -3);
  out_name(g, "y");
  BAD("concat_axis_negative", "", model(g, 17));

  g = graph();
  input(g, vi("x", FLOAT, DIMS(2, 3)));
  input(g, vi("z", FLOAT, DIMS(4, 5)));
  attr_i(node(g, "Concat", "x z", "y"), "axis", 0);
  out_name(g, "y");
  BAD("concat_shape_mismatch", "", model(g, 17));

  /* outputs that would be gigabytes or more */
  g = graph();
  init(g, i64("shape", DIMS(3), (const int64_t[]){100000, 100000, 100}));
  node(g, "ConstantOfShape", "shape", "y");
  out_name(g, "y");
  BAD("constantofshape_huge", "", model(g, 17));

  g = graph();
  init(g, i64("shape", DIMS(2), (const int64_t[]){-4, 5}));
  node(g, "ConstantOfShape", "shape", "y");
  out_name(g, "y");
  BAD("constantofshape_negative", "", model(g, 17));

  g = graph();
  init(g, f32("x", DIMS(1), NULL));
  init(g, i64("shape", DIMS(2), (const int64_t[]){(int64_t)1 << 20, (int64_t)1 << 20}));
  node(g, "Expand", "x shape", "y");
  out_name(g, "y");
  BAD("expand_huge", "", model(g, 17));

  g = graph();
  init(g, f32("x", DIMS(2, 2), NULL));
  init(g, i64("r", DIMS(2), (const int64_t[]){(int64_t)1 << 30, (int64_t)1 << 30}));
  node(g, "Tile", "x r", "y");
  out_name(g, "y");
  BAD("tile_huge", "", model(g, 17));

  g = graph();
  init(g, f32("x", DIMS(2, 2), NULL));
  init(g, i64("r", DIMS(2), (const int64_t[]){(int64_t)1 << 62, 4}));
  node(g, "Tile", "x r", "y");
  out_name(g, "y");
  BAD("tile_dims_overflow", "", model(g, 17));

  g = graph();
  init(g, i64("start", SCALAR, (const int64_t[]){0}));
  init(g, i64("limit", SCALAR, (const int64_t[]){(int64_t)1 << 40}));
  init(g, i64("delta", SCALAR, (const int64_t[]){1}));
  node(g, "Range", "start limit delta", "y");
  out_name(g, "y");
  BAD("range_huge", "", model(g, 17));

  g = graph();
  init(g, i64("start", SCALAR, (const int64_t[]){0}));
  init(g, i64("limit", SCALAR, (const int64_t[]){10}));
  init(g, i64("delta", SCALAR, (const int64_t[]){0}));
  node(g, "Range", "start limit delta", "y");
  out_name(g, "y");
  BAD("range_delta_zero", "", model(g, 17));

  g = graph();
  init(g, i64("start", SCALAR, (const int64_t[]){INT64_MIN}));
  init(g, i64("limit", SCALAR, (const int64_t[]){INT64_MAX}));
  init(g, i64("delta", SCALAR, (const int64_t[]){1}));
  node(g, "Range", "start limit delta", "y");
  out_name(g, "y");
  BAD("range_span_overflow", "", model(g, 17));

  /* an index out of range that only the kernel sees (inspect may accept) */
  g = graph();
  init(g, f32("data", DIMS(3), NULL));
  init(g, i64("idx", DIMS(2), (const int64_t[]){1, 7}));
  node(g, "Gather", "data idx", "y");
  out_name(g, "y");
  emit("gather_index_out_of_range", "runbad", "", model(g, 17));
}

/* one node over constant inputs (no graph inputs, so `run` needs no data
 * and prints no notes) */
static Node *one(Graph *g, const char *op, const char *ins) {
  Node *n = node(g, op, ins, "y");
  out_name(g, "y");
  return n;
}
/* 1-D int64 initializer holding the listed values */
#define I64(name, ...)                                                                  \
  init(g, i64(name, 1,                                                                  \
              (const int64_t[]){(int64_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))}, \
              (const int64_t[]){__VA_ARGS__}))
#define I64S(name, v) init(g, i64(name, SCALAR, (const int64_t[]){v}))
#define F32S(name, v) init(g, f32(name, SCALAR, (const float[]){v}))
#define X(name, ...) init(g, f32(name, DIMS(__VA_ARGS__), NULL))

/* Parameters that reach the op functions and kernels: sizes computed from
 * data, zero divisors, indices, and integer arithmetic at its limits. */
static void kernels(void) {
  Graph *g;
  /* integer arithmetic whose result ONNX leaves open: any clean outcome */
  g = graph(); I64("a", 7, 8); I64("b", 0, 1); one(g, "Div", "a b");
  emit("div_int_by_zero", "clean", "", model(g, 17));
  g = graph();
  init(g, i32("a", DIMS(2), (const int32_t[]){7, 8}));
  init(g, i32("b", DIMS(2), (const int32_t[]){0, 0}));
  one(g, "Div", "a b");
  emit("div_int32_by_zero", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MIN); I64("b", -1); one(g, "Div", "a b");
  emit("div_int64_min_by_minus_one", "clean", "", model(g, 17));
  g = graph(); I64("a", 7, 8); I64("b", 0, 3); one(g, "Mod", "a b");
  emit("mod_int_by_zero", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MIN); I64("b", -1); one(g, "Mod", "a b");
  emit("mod_int64_min_by_minus_one", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX); I64("b", 1); one(g, "Add", "a b");
  emit("add_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MIN); I64("b", 1); one(g, "Sub", "a b");
  emit("sub_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX); I64("b", 2); one(g, "Mul", "a b");
  emit("mul_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MIN); one(g, "Neg", "a");
  emit("neg_int64_min", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MIN); one(g, "Abs", "a");
  emit("abs_int64_min", "clean", "", model(g, 17));
  g = graph(); I64("a", 10); I64("b", 40); one(g, "Pow", "a b");
  emit("pow_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX, 1); one(g, "ReduceSum", "a");
  emit("reducesum_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX, 1); one(g, "ReduceProd", "a");
  emit("reduceprod_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX, 1); I64S("axis", 0); one(g, "CumSum", "a axis");
  emit("cumsum_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX, INT64_MIN); I64("b", INT64_MIN, INT64_MAX); one(g, "Sum", "a b");
  emit("sum_int64_overflow", "clean", "", model(g, 17));
  g = graph(); I64("a", INT64_MAX, INT64_MAX); one(g, "ReduceMean", "a");
  emit("reducemean_int64_overflow", "clean", "", model(g, 17));
  g = graph(); X("x", 3, 3); I64S("k", INT64_MIN); one(g, "Trilu", "x k");
  emit("trilu_k_int64_min", "clean", "", model(g, 17));
  g = graph(); X("x", 3, 3); attr_i(one(g, "EyeLike", "x"), "k", INT64_MIN);
  emit("eyelike_k_int64_min", "clean", "", model(g, 17));
  g = graph(); init(g, f32("x", DIMS(3), (const float[]){0.0f / 0.0f, 1e30f, -1e30f}));
  attr_i(one(g, "Cast", "x"), "to", INT64);
  emit("cast_nan_and_huge_to_int", "clean", "", model(g, 17));

  /* sizes from data */
  g = graph(); X("x", 2, 2); I64("pads", 0, 0, (int64_t)1 << 20, (int64_t)1 << 20);
  one(g, "Pad", "x pads");
  BAD("pad_huge", "", model(g, 17));
  g = graph(); X("x", 2, 2); I64("pads", 0, 0, -5, -5); one(g, "Pad", "x pads");
  BAD("pad_negative_past_size", "", model(g, 17));
  g = graph(); X("x", 1, 1, 2, 2);
  init(g, f32("scales", DIMS(4), (const float[]){1, 1, 1e6f, 1e6f}));
  one(g, "Resize", "x ~ scales");
  BAD("resize_huge", "", model(g, 17));
  g = graph(); X("x", 1, 1, 2, 2);
  init(g, f32("scales", DIMS(4), (const float[]){1, 1, 0.0f / 0.0f, 1}));
  one(g, "Resize", "x ~ scales");
  BAD("resize_nan_scale", "", model(g, 17));
  g = graph(); I64("idx", 0, 1); I64S("depth", (int64_t)1 << 40);
  init(g, f32("values", DIMS(2), (const float[]){0, 1}));
  one(g, "OneHot", "idx depth values");
  BAD("onehot_huge_depth", "", model(g, 17));
  g = graph(); F32S("start", 0); F32S("limit", 1e30f); F32S("delta", 1);
  one(g, "Range", "start limit delta");
  BAD("range_float_huge", "", model(g, 17));
  g = graph(); F32S("start", 0); F32S("limit", 0.0f / 0.0f); F32S("delta", 1);
  one(g, "Range", "start limit delta");
  BAD("range_float_nan", "", model(g, 17));
  g = graph(); F32S("start", 0); F32S("limit", 1.0f / 0.0f); F32S("delta", 1);
  one(g, "Range", "start limit delta");
  BAD("range_float_infinite", "", model(g, 17));

  /* attributes and inputs inconsistent with the shapes */
  g = graph(); X("x", 1, 4, 2, 2); attr_i(one(g, "DepthToSpace", "x"), "blocksize", 0);
  BAD("depthtospace_blocksize_0", "", model(g, 17));
  g = graph(); X("x", 1, 4, 2, 2); attr_i(one(g, "SpaceToDepth", "x"), "blocksize", 0);
  BAD("spacetodepth_blocksize_0", "", model(g, 17));
  g = graph(); X("x", 1, 4, 2, 2); attr_i(one(g, "DepthToSpace", "x"), "blocksize", (int64_t)1 << 40);
  BAD("depthtospace_blocksize_huge", "", model(g, 17));
  g = graph(); X("x", 5); I64("k", 10);
  node(g, "TopK", "x k", "y i");
  out_name(g, "y");
  BAD("topk_k_past_dim", "", model(g, 17));
  g = graph(); X("x", 5); I64("k", -1);
  node(g, "TopK", "x k", "y i");
  out_name(g, "y");
  BAD("topk_k_negative", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("shape", 4, 2); one(g, "Reshape", "x shape");
  BAD("reshape_count_mismatch", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("shape", -1, -1); one(g, "Reshape", "x shape");
  BAD("reshape_two_minus_ones", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("shape", 0, 0, 0); one(g, "Reshape", "x shape");
  BAD("reshape_zero_copies_missing_dim", "", model(g, 17));
  g = graph(); X("x", 6); I64("split", 2, 2); node(g, "Split", "x split", "a b");
  out_name(g, "a");
  BAD("split_sizes_mismatch", "", model(g, 17));
  g = graph(); X("x", 6); I64("split", 8, -2); node(g, "Split", "x split", "a b");
  out_name(g, "a");
  BAD("split_negative_size", "", model(g, 17));
  g = graph(); X("x", 6); I64("s", 0); I64("e", 6); I64("ax", 0); I64("st", 0);
  one(g, "Slice", "x s e ax st");
  BAD("slice_step_zero", "", model(g, 17));
  g = graph(); X("x", 6); I64("s", 0); I64("e", 6); I64("ax", 3); one(g, "Slice", "x s e ax");
  BAD("slice_axis_out_of_range", "", model(g, 17));
  g = graph(); X("x", 6); I64("s", INT64_MIN); I64("e", INT64_MAX); I64("ax", 0);
  I64("st", INT64_MIN); one(g, "Slice", "x s e ax st");
  emit("slice_step_int64_min", "clean", "", model(g, 17));  /* legal: an empty slice */
  g = graph(); X("x", 1, 3, 5, 5); X("w", 2, 3, 3, 3);
  attr_i(one(g, "Conv", "x w"), "group", 2);
  BAD("conv_group_mismatch", "", model(g, 17));
  g = graph(); X("x", 1, 3, 5, 5); X("w", 2, 3, 3, 3);
  attr_i(one(g, "Conv", "x w"), "group", 0);
  BAD("conv_group_zero", "", model(g, 17));
  g = graph(); X("x", 1, 1, 2, 2); X("w", 1, 1, 5, 5); one(g, "Conv", "x w");
  BAD("conv_kernel_past_input", "", model(g, 17));
  g = graph(); X("x", 1, 1, 5, 5); X("w", 1, 1, 3, 3); X("b", 7); one(g, "Conv", "x w b");
  BAD("conv_bias_length", "", model(g, 17));
  g = graph(); X("x", 1, 1, 5, 5); X("w", 1, 1, 3, 3);
  attr_ints(one(g, "Conv", "x w"), "dilations", DIMS((int64_t)1 << 62, 1));
  BAD("conv_dilation_huge", "", model(g, 17));
  g = graph(); X("x", 1, 1, 2, 2); attr_ints(one(g, "MaxPool", "x"), "kernel_shape", DIMS(5, 5));
  BAD("maxpool_kernel_past_input", "", model(g, 17));
  g = graph(); X("x", 1, 2, 4, 4);
  Node *mp = one(g, "MaxPool", "x");
  attr_ints(mp, "kernel_shape", DIMS(2, 2));
  attr_i(mp, "layout", 1); /* gpuc's internal NHWC marker, not ONNX's */
  BAD("maxpool_internal_layout", "no attribute 'layout'", model(g, 17));
  g = graph(); X("x", 1, 1, 4, 4); attr_ints(one(g, "AveragePool", "x"), "kernel_shape", DIMS(0, 0));
  BAD("averagepool_kernel_zero", "", model(g, 17));
  g = graph(); X("x", 3); X("w", 4); one(g, "MatMul", "x w");
  BAD("matmul_vectors_mismatch", "", model(g, 17));
  g = graph(); X("a", 2, 3); X("b", 2, 3); one(g, "Gemm", "a b");
  BAD("gemm_shape_mismatch", "", model(g, 17));
  g = graph(); X("x", 2, 3); attr_s(one(g, "Einsum", "x"), "equation", "ab,,->>", 7);
  BAD("einsum_garbage_equation", "", model(g, 17));
  g = graph(); X("x", 2, 3); X("z", 2, 3);
  attr_s(one(g, "Einsum", "x z"), "equation", "ij,ij->k", 8);
  BAD("einsum_output_label_unknown", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("axes", 0); one(g, "Squeeze", "x axes");
  BAD("squeeze_dim_not_one", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("axes", 0, 0); one(g, "Unsqueeze", "x axes");
  BAD("unsqueeze_axis_twice", "", model(g, 17));
  g = graph(); X("x", 2, 2, 2, 2, 2, 2, 2, 2); I64("axes", 0); one(g, "Unsqueeze", "x axes");
  BAD("unsqueeze_past_max_rank", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("idx", 0); attr_i(one(g, "Gather", "x idx"), "axis", 5);
  BAD("gather_axis_out_of_range", "", model(g, 17));
  g = graph(); X("x", 2, 3); attr_i(one(g, "Softmax", "x"), "axis", 4);
  BAD("softmax_axis_out_of_range", "", model(g, 17));
  g = graph(); X("x", 2, 3); attr_i(one(g, "Flatten", "x"), "axis", 5);
  BAD("flatten_axis_out_of_range", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("axes", 7); one(g, "ReduceSum", "x axes");
  BAD("reducesum_axis_out_of_range", "", model(g, 17));
  g = graph(); X("x", 3); I64("shape", 2); one(g, "Expand", "x shape");
  BAD("expand_incompatible", "", model(g, 17));
  g = graph(); X("x", 3); I64("shape", -7); one(g, "Expand", "x shape");
  BAD("expand_negative_dim", "", model(g, 17));
  g = graph(); X("x", 1, 3, 2, 2); X("s", 2); X("b", 3); X("m", 3); X("v", 3);
  one(g, "BatchNormalization", "x s b m v");
  BAD("batchnorm_scale_length", "", model(g, 17));
  g = graph(); X("x", 2, 3); attr_i(one(g, "Cast", "x"), "to", 99);
  BAD("cast_to_unknown_type", "", model(g, 17));
  g = graph(); X("x", 2, 3); attr_i(one(g, "Cast", "x"), "to", STRING);
  BAD("cast_to_string", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("r", 2); one(g, "Tile", "x r");
  BAD("tile_repeats_length", "", model(g, 17));
  g = graph(); X("x", 2, 3); I64("r", 2, -1); one(g, "Tile", "x r");
  BAD("tile_repeats_negative", "", model(g, 17));
  g = graph();
  Tensor *cond = tensor("a", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, DIMS(2, 3));
  raw(cond, "\1\0\1\0\1\0", 6);
  init(g, cond); X("b", 3, 2); X("c", 4, 2); one(g, "Where", "a b c");
  BAD("where_shape_mismatch", "", model(g, 17));

  /* indices only a kernel sees */
  g = graph(); X("x", 4); init(g, i64("idx", DIMS(1, 1), (const int64_t[]){9})); X("u", 1);
  one(g, "ScatterND", "x idx u");
  emit("scatternd_index_out_of_range", "runbad", "", model(g, 17));
  g = graph(); X("x", 4); I64("idx", 1, -9); X("u", 2); one(g, "ScatterElements", "x idx u");
  emit("scatterelements_index_out_of_range", "runbad", "", model(g, 17));
  g = graph(); X("x", 2, 2); init(g, i64("idx", DIMS(1, 2), (const int64_t[]){1, 5}));
  one(g, "GatherElements", "x idx");
  emit("gatherelements_index_out_of_range", "runbad", "", model(g, 17));
  g = graph(); X("x", 2, 2); init(g, i64("idx", DIMS(1, 2), (const int64_t[]){0, 7}));
  one(g, "GatherND", "x idx");
  emit("gathernd_index_out_of_range", "runbad", "", model(g, 17));
  g = graph(); X("x", 2, 2); init(g, i64("idx", DIMS(1, 2), (const int64_t[]){INT64_MIN, 0}));
  one(g, "GatherND", "x idx");
  emit("gathernd_index_int64_min", "runbad", "", model(g, 17));
  g = graph(); X("x", 3); I64("idx", INT64_MIN); one(g, "Gather", "x idx");
  emit("gather_index_int64_min", "runbad", "", model(g, 17));
  g = graph(); X("x", 3); I64S("axis", 5); one(g, "CumSum", "x axis");
  emit("cumsum_axis_out_of_range", "runbad", "", model(g, 17));
  g = graph(); I64("idx", 0, 7); I64S("depth", 3);
  init(g, f32("values", DIMS(3), (const float[]){0, 1, 2}));
  one(g, "OneHot", "idx depth values");
  BAD("onehot_values_length", "", model(g, 17));
  g = graph(); X("x", 3, 4); init(g, i64("lab", DIMS(3), (const int64_t[]){0, 9, -5}));
  one(g, "SoftmaxCrossEntropyLoss", "x lab");
  emit("softmaxcrossentropy_label_out_of_range", "runbad", "", model(g, 17));
}

/* The ops of issue 11 (Mish, Bitwise*, BitShift, ReverseSequence, Det,
 * MaxUnpool, Col2Im, CenterCropPad): attributes and shapes that do not fit,
 * sizes from data, and lengths/indices only a kernel sees. */
static void small_ops(void) {
  Graph *g;
  Tensor *u;
  g = graph();
  u = tensor("a", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, DIMS(2));
  raw(u, "\1\2", 2);
  init(g, u);
  attr_s(one(g, "BitShift", "a a"), "direction", "UP", 2);
  BAD("bitshift_direction", "direction", model(g, 18));
  g = graph(); I64("a", 1, 2); I64("b", 1, 1); attr_s(one(g, "BitShift", "a b"), "direction", "LEFT", 4);
  BAD("bitshift_signed_before_opset28", "dtype", model(g, 18));
  g = graph(); X("a", 2); X("b", 2); one(g, "BitwiseAnd", "a b");
  BAD("bitwiseand_float", "dtype", model(g, 18));
  g = graph(); I64("a", 1, 2); one(g, "Mish", "a");
  BAD("mish_int64", "dtype", model(g, 18));
  g = graph(); X("x", 2, 3); I64("len", 1, 1, 1); attr_i(one(g, "ReverseSequence", "x len"), "time_axis", 1);
  BAD("reversesequence_same_axes", "batch_axis and time_axis", model(g, 17));
  g = graph(); X("x", 2, 3); I64("len", 1, 1); one(g, "ReverseSequence", "x len");
  BAD("reversesequence_lens_count", "sequence_lens", model(g, 17));
  g = graph(); X("x", 2, 3); I64("len", 1, 3, 1); one(g, "ReverseSequence", "x len");
  emit("reversesequence_len_out_of_range", "runbad", "outside [0, 2]", model(g, 17));
  g = graph(); X("x", 2, 3); one(g, "Det", "x");
  BAD("det_not_square", "square", model(g, 17));
  g = graph(); X("x", 3); one(g, "Det", "x");
  BAD("det_rank1", "rank 1", model(g, 17));
  g = graph(); X("x", 1, 1, 2); init(g, i64("i", DIMS(1, 1, 2), (const int64_t[]){1, 2})); one(g, "MaxUnpool", "x i");
  BAD("maxunpool_no_kernel_shape", "kernel_shape", model(g, 17));
  g = graph(); X("x", 1, 1, 2); init(g, i64("i", DIMS(1, 1, 2), (const int64_t[]){1, 9}));
  attr_ints(one(g, "MaxUnpool", "x i"), "kernel_shape", 1, (const int64_t[]){2});
  emit("maxunpool_index_out_of_range", "runbad", "outside [0, 3)", model(g, 17));
  g = graph(); X("x", 1, 1, 2); init(g, i64("i", DIMS(1, 1, 2), (const int64_t[]){1, 2})); I64("os", 1, 1, 2);
  attr_ints(one(g, "MaxUnpool", "x i os"), "kernel_shape", 1, (const int64_t[]){2});
  BAD("maxunpool_output_shape_small", "smaller than", model(g, 17));
  g = graph(); X("x", 1, 4, 1); I64("im", 1, 1); I64("bl", 2, 2); one(g, "Col2Im", "x im bl");
  BAD("col2im_block_larger_than_image", "does not fit", model(g, 18));
  g = graph(); X("x", 1, 4, 5); I64("im", 3, 3); I64("bl", 2, 2); one(g, "Col2Im", "x im bl");
  BAD("col2im_wrong_block_count", "number of blocks", model(g, 18));
  g = graph(); X("x", 1, 1, 1); I64("im", (int64_t)1 << 40, (int64_t)1 << 40); I64("bl", 1, 1);
  one(g, "Col2Im", "x im bl");
  BAD("col2im_huge_image", "", model(g, 18));
  g = graph(); X("x", 2, 3); I64("s", 1, 1);
  attr_ints(one(g, "CenterCropPad", "x s"), "axes", 2, (const int64_t[]){1, -1});
  BAD("centercroppad_axis_twice", "twice", model(g, 18));
  g = graph(); X("x", 2, 3); I64("s", (int64_t)1 << 40, (int64_t)1 << 40); one(g, "CenterCropPad", "x s");
  BAD("centercroppad_huge", "", model(g, 18));
}

int main(int argc, char **argv) {
  if (argc != 2) die("usage: gen_hostile OUTDIR");
  if (mkdir(argv[1], 0755) && errno != EEXIST) die("mkdir %s: %s", argv[1], strerror(errno));
  /* absolute, so the absolute-location case names the real outside file */
  char outdir[PATH_MAX];
  if (!realpath(argv[1], outdir)) die("%s: %s", argv[1], strerror(errno));
  if (snprintf(models_dir, sizeof models_dir, "%s/models", outdir) >= (int)sizeof models_dir)
    die("path too long");
  if (mkdir(models_dir, 0755)) die("mkdir %s: %s (must not exist yet)", models_dir, strerror(errno));
  char mpath[4352];
  path_of(mpath, sizeof mpath, "cases.txt");
  manifest = fopen(mpath, "w");
  if (!manifest) die("%s: %s", mpath, strerror(errno));

  valid_controls();
  broken_files();
  model_level();
  tensors();
  structure();
  ops_and_attributes();
  value_types();
  deep_nesting();
  external_data(outdir);
  shapes();
  kernels();
  small_ops();

  if (fclose(manifest)) die("%s: write failed", mpath);
  pool_reset();
  free(pool);
  printf("gen_hostile: %d cases in %s\n", ncases, models_dir);
  return 0;
}
