/* ONNX writer: builds protobuf-c structs in growable arrays, then packs. */
#include "onnx_builder.h"
#include "onnx.pb-c.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct OnnxBuilder {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
};

static void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n ? n : 1, s);
  if (!p) { fprintf(stderr, "onnx_builder: out of memory\n"); exit(1); }
  return p;
}
#define PUSH(arr, n, item)                                            \
  do {                                                                \
    (arr) = realloc((arr), sizeof(*(arr)) * ((n) + 1));               \
    if (!(arr)) { fprintf(stderr, "out of memory\n"); exit(1); }      \
    (arr)[(n)++] = (item);                                            \
  } while (0)

OnnxBuilder *ob_new(const char *graph_name, int64_t opset) {
  OnnxBuilder *b = xcalloc(1, sizeof *b);
  onnx__model_proto__init(&b->model);
  onnx__graph_proto__init(&b->graph);
  onnx__operator_set_id_proto__init(&b->opset);
  b->opset.domain = strdup("");
  b->opset.has_version = 1;
  b->opset.version = opset;
  b->opsets[0] = &b->opset;
  b->model.has_ir_version = 1;
  b->model.ir_version = 8;
  b->model.producer_name = strdup("gpuc models/");
  b->model.n_opset_import = 1;
  b->model.opset_import = b->opsets;
  b->graph.name = strdup(graph_name);
  b->model.graph = &b->graph;
  return b;
}

static Onnx__ValueInfoProto *value_info(const char *name, int elem, int rank, const int64_t *dims,
                                        const char *sym) {
  Onnx__ValueInfoProto *vi = xcalloc(1, sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = strdup(name);
  Onnx__TypeProto *tp = xcalloc(1, sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor *tt = xcalloc(1, sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  Onnx__TensorShapeProto *sp = xcalloc(1, sizeof *sp);
  onnx__tensor_shape_proto__init(sp);
  sp->n_dim = (size_t)rank;
  sp->dim = xcalloc((size_t)rank, sizeof *sp->dim);
  const char *next = sym ? sym : "N"; /* "batch,seq": one name per symbolic dim */
  for (int i = 0; i < rank; i++) {
    Onnx__TensorShapeProto__Dimension *d = xcalloc(1, sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      size_t len = strcspn(next, ",");
      d->dim_param = xcalloc(len + 1, 1);
      memcpy(d->dim_param, next, len);
      if (next[len] == ',') next += len + 1; /* the last name repeats */
    }
    sp->dim[i] = d;
  }
  tt->shape = sp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->type = tp;
  return vi;
}

void ob_input(OnnxBuilder *b, const char *name, int elem, int rank, const int64_t *dims,
              const char *sym) {
  PUSH(b->graph.input, b->graph.n_input, value_info(name, elem, rank, dims, sym));
}
void ob_output(OnnxBuilder *b, const char *name, int elem, int rank, const int64_t *dims) {
  PUSH(b->graph.output, b->graph.n_output, value_info(name, elem, rank, dims, NULL));
}

static Onnx__TensorProto *tensor(const char *name, int elem, int rank, const int64_t *dims,
                                 const void *data, size_t bytes) {
  Onnx__TensorProto *t = xcalloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = strdup(name);
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = xcalloc((size_t)rank, sizeof(int64_t));
  if (rank) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = xcalloc(bytes, 1);
  if (bytes) memcpy(t->raw_data.data, data, bytes);
  return t;
}

static size_t count(int rank, const int64_t *dims) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return n;
}

void ob_init_f32(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const float *data) {
  PUSH(b->graph.initializer, b->graph.n_initializer,
       tensor(name, 1, rank, dims, data, count(rank, dims) * 4));
}
void ob_init_i64(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const int64_t *data) {
  PUSH(b->graph.initializer, b->graph.n_initializer,
       tensor(name, 7, rank, dims, data, count(rank, dims) * 8));
}
void ob_init_bool(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const uint8_t *data) {
  PUSH(b->graph.initializer, b->graph.n_initializer, tensor(name, 9, rank, dims, data, count(rank, dims)));
}

void ob_node(OnnxBuilder *b, const char *op, const char *name, const char *const *ins,
             const char *const *outs) {
  Onnx__NodeProto *n = xcalloc(1, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = strdup(op);
  n->name = strdup(name);
  for (; *ins; ins++) PUSH(n->input, n->n_input, strdup(*ins));
  for (; *outs; outs++) PUSH(n->output, n->n_output, strdup(*outs));
  PUSH(b->graph.node, b->graph.n_node, n);
}

static Onnx__AttributeProto *new_attr(OnnxBuilder *b, const char *name) {
  Onnx__NodeProto *n = b->graph.node[b->graph.n_node - 1];
  Onnx__AttributeProto *a = xcalloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = strdup(name);
  a->has_type = 1;
  PUSH(n->attribute, n->n_attribute, a);
  return a;
}
void ob_attr_i(OnnxBuilder *b, const char *name, int64_t v) {
  Onnx__AttributeProto *a = new_attr(b, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
}
void ob_attr_f(OnnxBuilder *b, const char *name, float v) {
  Onnx__AttributeProto *a = new_attr(b, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a->has_f = 1;
  a->f = v;
}
void ob_attr_ints(OnnxBuilder *b, const char *name, int n, const int64_t *v) {
  Onnx__AttributeProto *a = new_attr(b, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = (size_t)n;
  a->ints = xcalloc((size_t)n, sizeof(int64_t));
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

int ob_save(OnnxBuilder *b, const char *path) {
  size_t len = onnx__model_proto__get_packed_size(&b->model);
  uint8_t *buf = xcalloc(len, 1);
  onnx__model_proto__pack(&b->model, buf);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  int ok = f && fwrite(buf, 1, len, f) == len;
  if (f) ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    fprintf(stderr, "onnx_builder: cannot write %s\n", path);
    free(buf);
    return -1;
  }
  free(buf);
  /* The process exits right after writing models; the protobuf structs are
   * left to the OS rather than walked for free. */
  return 0;
}

float ob_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
