/* ModelProto -> Graph. The order of checks follows the file: model header,
 * opsets, initializers, inputs, nodes (ops, arity, attributes, names),
 * outputs; then topological sort, verification and shape inference. */
#include "frontend_internal.h"
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- name -> value index, open addressing ---- */
typedef struct { const char **keys; int *vals; size_t cap; } NameMap;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) { h ^= (uint8_t)*s++; h *= 1099511628211ull; }
  return h;
}
static int map_init(NameMap *m, size_t n) {
  m->cap = 16;
  while (m->cap < n * 2 + 16) m->cap *= 2;
  m->keys = calloc(m->cap, sizeof *m->keys);
  m->vals = calloc(m->cap, sizeof *m->vals);
  return m->keys && m->vals ? 0 : -1;
}
static void map_free(NameMap *m) { free(m->keys); free(m->vals); }
static int map_get(const NameMap *m, const char *k) {
  for (size_t i = hash_str(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return -1;
    if (!strcmp(m->keys[i], k)) return m->vals[i];
  }
}
static void map_put(NameMap *m, const char *k, int v) { /* capacity sized up front */
  size_t i = hash_str(k) & (m->cap - 1);
  while (m->keys[i]) i = (i + 1) & (m->cap - 1);
  m->keys[i] = k;
  m->vals[i] = v;
}

typedef struct {
  Graph *g;
  NameMap names;
  const char *model_dir;
  GpucErr *e;
  bool no_default_opset;   /* the model imports only other domains */
} Loader;

static bool valid_name(const char *s) { return s && *s; }

/* ---- attributes ---- */
static int convert_attr(Loader *L, const Onnx__NodeProto *np, const char *node_name,
                        const Onnx__AttributeProto *ap, Attr *a) {
  Graph *g = L->g;
  if (!valid_name(ap->name))
    return gpuc_err_set(L->e, "%s: node '%s' (%s): attribute without a name", g->path,
                        node_name, np->op_type);
  a->name = gpuc_arena_strdup(&g->arena, ap->name, strlen(ap->name));
  if (!a->name) return gpuc_err_set(L->e, "%s: out of memory", g->path);
  if (ap->ref_attr_name)
    return gpuc_err_unsupported(L->e, "%s: node '%s' (%s): attribute '%s' refers to a function "
                                "attribute, which is not supported", g->path, node_name,
                                np->op_type, ap->name);
  int type = ap->has_type ? (int)ap->type : 0;
  if (!ap->has_type) { /* pre-IR3 models: infer from which field is set */
    if (ap->n_ints) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    else if (ap->n_floats) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    else if (ap->t) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    else if (ap->has_s) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    else if (ap->has_f) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    else if (ap->has_i) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  }
  switch (type) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
    a->kind = GPUC_ATTR_FLOAT; a->f = ap->f; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
    a->kind = GPUC_ATTR_INT; a->i = ap->i; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
    a->kind = GPUC_ATTR_STRING;
    a->s = gpuc_arena_strdup(&g->arena, (const char *)ap->s.data, ap->s.len);
    if (ap->s.len && memchr(ap->s.data, 0, ap->s.len))
      return gpuc_err_set(L->e, "%s: node '%s' (%s): attribute '%s' has a NUL byte", g->path,
                          node_name, np->op_type, ap->name);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
    a->kind = GPUC_ATTR_FLOATS;
    a->n = (int)ap->n_floats;
    a->floats = gpuc_arena_alloc(&g->arena, sizeof(float) * (ap->n_floats + 1));
    if (!a->floats) return gpuc_err_set(L->e, "%s: out of memory", g->path);
    /* an empty list arrives as NULL, which memcpy must not get */
    if (ap->n_floats) memcpy(a->floats, ap->floats, sizeof(float) * ap->n_floats);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    a->kind = GPUC_ATTR_INTS;
    a->n = (int)ap->n_ints;
    a->ints = gpuc_arena_alloc(&g->arena, sizeof(int64_t) * (ap->n_ints + 1));
    if (!a->ints) return gpuc_err_set(L->e, "%s: out of memory", g->path);
    if (ap->n_ints) memcpy(a->ints, ap->ints, sizeof(int64_t) * ap->n_ints);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
    a->kind = GPUC_ATTR_STRINGS;
    a->n = (int)ap->n_strings;
    a->strings = gpuc_arena_alloc(&g->arena, sizeof(char *) * (ap->n_strings + 1));
    if (!a->strings) return gpuc_err_set(L->e, "%s: out of memory", g->path);
    for (size_t i = 0; i < ap->n_strings; i++)
      a->strings[i] = gpuc_arena_strdup(&g->arena, (const char *)ap->strings[i].data,
                                        ap->strings[i].len);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
    if (!ap->t)
      return gpuc_err_set(L->e, "%s: node '%s' (%s): tensor attribute '%s' has no tensor",
                          g->path, node_name, np->op_type, ap->name);
    char what[1024];
    snprintf(what, sizeof what, "%s: node '%s' (%s): attribute '%s'", g->path, node_name,
             np->op_type, ap->name);
    a->kind = GPUC_ATTR_TENSOR;
    a->t = calloc(1, sizeof *a->t);
    if (!a->t) return gpuc_err_set(L->e, "%s: out of memory", g->path);
    if (gpuc_tensor_from_proto(ap->t, L->model_dir, what, a->t, L->e)) {
      free(a->t);
      a->t = NULL;
      return -1;
    }
    break;
  }
  default:
    return gpuc_err_unsupported(L->e, "%s: node '%s' (%s): attribute '%s' has type %d "
                                "(graphs, sparse tensors and type protos are not supported)",
                                g->path, node_name, np->op_type, ap->name, type);
  }
  return 0;
}

/* ---- value types (graph inputs) ---- */
static int convert_value_info(Loader *L, const Onnx__ValueInfoProto *vi, Value *v) {
  const char *path = L->g->path;
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return gpuc_err_unsupported(L->e, "%s: input '%s': only tensor inputs are supported "
                                "(not sequences, maps, optionals or sparse tensors)", path, v->name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  GpucDType dt = gpuc_onnx_dtype(tt->has_elem_type ? tt->elem_type : 0);
  if (dt == GPUC_DT_UNDEF)
    return gpuc_err_unsupported(L->e, "%s: input '%s': element type %s is not supported", path,
                                v->name, gpuc_onnx_dtype_name(tt->has_elem_type ? tt->elem_type : 0));
  v->t.dt = dt;
  if (!tt->shape) { v->t.rank = -1; return 0; }
  if (tt->shape->n_dim > GPUC_MAX_RANK)
    return gpuc_err_set(L->e, "%s: input '%s': rank %zu is beyond the supported %d", path,
                        v->name, tt->shape->n_dim, GPUC_MAX_RANK);
  v->t.rank = (int)tt->shape->n_dim;
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    v->t.dims[i] = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return gpuc_err_set(L->e, "%s: input '%s': negative dim %lld", path, v->name,
                            (long long)d->dim_value);
      v->t.dims[i] = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               d->dim_param) {
      v->sym[i] = gpuc_arena_strdup(&L->g->arena, d->dim_param, strlen(d->dim_param));
    }
  }
  /* The known dims must multiply within int64 even when others are
   * symbolic, so no shape arithmetic on them can overflow later. */
  int64_t known[GPUC_MAX_RANK];
  for (int i = 0; i < v->t.rank; i++) known[i] = v->t.dims[i] < 0 ? 1 : v->t.dims[i];
  if (gpuc_shape_numel(v->t.rank, known) < 0)
    return gpuc_err_set(L->e, "%s: input '%s': element count overflows int64", path, v->name);
  return 0;
}

/* Constant node -> constant value (the node itself is dropped). */
static int constant_value(Loader *L, const Node *n, const char *op_type, Value *v) {
  Graph *g = L->g;
  if (n->nattr != 1)
    return gpuc_err_set(L->e, "%s: node '%s' (Constant): needs exactly one value attribute, has %d",
                        g->path, n->name, n->nattr);
  const Attr *a = &n->attrs[0];
  int64_t one = 1;
  Tensor *t = &v->t;
  GpucErr *e = L->e;
  if (!strcmp(a->name, "value") && a->kind == GPUC_ATTR_TENSOR) {
    *t = *a->t;                     /* take ownership of the data */
    a->t->data = NULL;
    return 0;
  }
  if (!strcmp(a->name, "value_float") && a->kind == GPUC_ATTR_FLOAT) {
    gpuc_set_shape(t, GPUC_DT_F32, 0, NULL);
    if (gpuc_tensor_alloc(t, e)) return -1;
    ((float *)t->data)[0] = a->f;
  } else if (!strcmp(a->name, "value_int") && a->kind == GPUC_ATTR_INT) {
    gpuc_set_shape(t, GPUC_DT_I64, 0, NULL);
    if (gpuc_tensor_alloc(t, e)) return -1;
    ((int64_t *)t->data)[0] = a->i;
  } else if (!strcmp(a->name, "value_floats") && a->kind == GPUC_ATTR_FLOATS) {
    one = a->n;
    gpuc_set_shape(t, GPUC_DT_F32, 1, &one);
    if (gpuc_tensor_alloc(t, e)) return -1;
    memcpy(t->data, a->floats, sizeof(float) * (size_t)a->n);
  } else if (!strcmp(a->name, "value_ints") && a->kind == GPUC_ATTR_INTS) {
    one = a->n;
    gpuc_set_shape(t, GPUC_DT_I64, 1, &one);
    if (gpuc_tensor_alloc(t, e)) return -1;
    memcpy(t->data, a->ints, sizeof(int64_t) * (size_t)a->n);
  } else {
    return gpuc_err_unsupported(e, "%s: node '%s' (%s): constant attribute '%s' is not supported",
                                g->path, n->name, op_type, a->name);
  }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Fail naming an attribute given twice. Sorting a copy of the names keeps
 * this O(n log n): the file decides how many attributes a node has. */
static int check_attr_dups(Loader *L, const Node *n, const char *op_type) {
  if (n->nattr < 2) return 0;
  const char **names = malloc(sizeof *names * (size_t)n->nattr);
  if (!names) return gpuc_err_set(L->e, "%s: out of memory", L->g->path);
  for (int k = 0; k < n->nattr; k++) names[k] = n->attrs[k].name;
  qsort(names, (size_t)n->nattr, sizeof *names, cmp_name);
  int rc = 0;
  for (int k = 1; k < n->nattr && !rc; k++)
    if (!strcmp(names[k - 1], names[k]))
      rc = gpuc_err_set(L->e, "%s: node '%s' (%s): attribute '%s' given twice", L->g->path,
                        n->name, op_type, names[k]);
  free(names);
  return rc;
}

/* Define a new value name, failing if it is already defined. */
static int define_value(Loader *L, const char *name, const char *what) {
  if (map_get(&L->names, name) >= 0)
    return gpuc_err_set(L->e, "%s: %s: the name '%s' is defined twice", L->g->path, what, name);
  int vi = gpuc_graph_add_value(L->g, name);
  if (vi < 0) return gpuc_err_set(L->e, "%s: out of memory", L->g->path);
  map_put(&L->names, L->g->values[vi].name, vi);
  return vi;
}

static int convert_graph(Loader *L, const Onnx__GraphProto *gp, const GpucFlatNodes *fn) {
  Graph *g = L->g;
  GpucErr *e = L->e;
  size_t nnames = gp->n_initializer + gp->n_input + gp->n_output;
  for (size_t i = 0; i < fn->n; i++) nnames += fn->node[i]->n_output;
  if (map_init(&L->names, nnames)) return gpuc_err_set(e, "%s: out of memory", g->path);
  if (gp->n_sparse_initializer)
    return gpuc_err_unsupported(e, "%s: sparse initializers are not supported", g->path);

  /* initializers: constant values */
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *tp = gp->initializer[i];
    if (!valid_name(tp->name))
      return gpuc_err_set(e, "%s: initializer #%zu has no name", g->path, i);
    /* define_value adds the path itself */
    char what[1024], label[512];
    snprintf(label, sizeof label, "initializer '%s'", tp->name);
    snprintf(what, sizeof what, "%s: %s", g->path, label);
    int vi = define_value(L, tp->name, label);
    if (vi < 0) return -1;
    Value *v = &g->values[vi];
    if (gpuc_tensor_from_proto(tp, L->model_dir, what, &v->t, e)) return -1;
    v->is_const = true;
    v->is_param = gpuc_dtype_is_float(v->t.dt);
  }
  /* inputs: those that name an initializer are defaults (IR < 4 lists them) */
  g->inputs = gpuc_arena_alloc(&g->arena, sizeof(int) * (gp->n_input + 1));
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!valid_name(vi->name)) return gpuc_err_set(e, "%s: graph input #%zu has no name", g->path, i);
    int existing = map_get(&L->names, vi->name);
    if (existing >= 0) {
      if (!g->values[existing].is_const || g->values[existing].is_input)
        return gpuc_err_set(e, "%s: graph input '%s' is listed twice", g->path, vi->name);
      continue;
    }
    char what[1024];
    snprintf(what, sizeof what, "graph input '%s'", vi->name);
    int idx = define_value(L, vi->name, what);
    if (idx < 0) return -1;
    g->values[idx].is_input = true;
    if (convert_value_info(L, vi, &g->values[idx])) return -1;
    g->inputs[g->ninputs++] = idx;
  }

  /* nodes: first define every output (nodes may come out of order) */
  int *node_index = calloc(fn->n + 1, sizeof(int));
  if (!node_index) return gpuc_err_set(e, "%s: out of memory", g->path);
  int rc = 0;
  for (size_t i = 0; i < fn->n && !rc; i++) {
    const Onnx__NodeProto *np = fn->node[i];
    char auto_name[32];
    snprintf(auto_name, sizeof auto_name, "#%zu", i);
    const char *nname = valid_name(np->name) ? np->name : auto_name;
    const char *op_type = np->op_type ? np->op_type : "";
    node_index[i] = -1;
    if (np->domain && *np->domain && strcmp(np->domain, "ai.onnx"))
      { rc = gpuc_err_unsupported(e, "%s: node '%s' (%s): unsupported op: domain '%s' is not supported",
                                  g->path, nname, op_type, np->domain); break; }
    if (L->no_default_opset)
      { rc = gpuc_err_set(e, "%s: node '%s' (%s): the model imports no default-domain opset",
                          g->path, nname, op_type); break; }
    int op = gpuc_op_lookup(op_type);
    if (op >= 0 && (gpuc_ops[op].flags & GPUC_OPF_INTERNAL)) op = -1; /* gpuc's own, not ONNX */
    if (op < 0)
      { rc = gpuc_err_unsupported(e, "%s: node '%s' (%s): unsupported op '%s'", g->path, nname,
                                  op_type, op_type); break; }
    const OpInfo *info = &gpuc_ops[op];
    /* trailing empty names are absent optional inputs/outputs */
    size_t nin = np->n_input, nout = np->n_output;
    while (nin > 0 && !valid_name(np->input[nin - 1])) nin--;
    /* unused outputs keep their slots (-1): Split's output count decides
     * how it divides the axis */
    if (info->max_out >= 0 && (int)nout > info->max_out)
      while (nout > 0 && !valid_name(np->output[nout - 1])) nout--;
    if ((int)nin < info->min_in || (info->max_in >= 0 && (int)nin > info->max_in) || nin > GPUC_MAX_IO)
      { rc = gpuc_err_set(e, "%s: node '%s' (%s): has %zu inputs, the op takes %d..%d", g->path,
                          nname, op_type, nin, info->min_in,
                          info->max_in < 0 ? GPUC_MAX_IO : info->max_in); break; }
    if ((int)nout < info->min_out || (info->max_out >= 0 && (int)nout > info->max_out) || nout > GPUC_MAX_IO)
      { rc = gpuc_err_set(e, "%s: node '%s' (%s): has %zu outputs, the op gives %d..%d", g->path,
                          nname, op_type, nout, info->min_out,
                          info->max_out < 0 ? GPUC_MAX_IO : info->max_out); break; }
    /* Only trailing inputs/outputs are optional: those the op always has
     * (index below its minimum) must be named, so op functions can rely on
     * in[k]/out[k] being present for them. */
    for (size_t k = 0; k < nin && (int)k < info->min_in && !rc; k++)
      if (!valid_name(np->input[k]))
        rc = gpuc_err_set(e, "%s: node '%s' (%s): input %zu is required but has an empty name",
                          g->path, nname, op_type, k);
    for (size_t k = 0; k < nout && (int)k < info->min_out && !rc; k++)
      if (!valid_name(np->output[k]))
        rc = gpuc_err_set(e, "%s: node '%s' (%s): output %zu is required but has an empty name",
                          g->path, nname, op_type, k);
    if (rc) break;
    int ni = gpuc_graph_add_node(g, (GpucOp)op, nname, (int)nin, (int)nout);
    if (ni < 0) { rc = gpuc_err_set(e, "%s: out of memory", g->path); break; }
    node_index[i] = ni;
    Node *n = &g->nodes[ni];
    n->nattr = (int)np->n_attribute;
    n->attrs = gpuc_arena_alloc(&g->arena, sizeof(Attr) * (np->n_attribute + 1));
    if (!n->attrs) { rc = gpuc_err_set(e, "%s: out of memory", g->path); break; }
    for (size_t k = 0; k < np->n_attribute && !rc; k++)
      rc = convert_attr(L, np, nname, np->attribute[k], &n->attrs[k]);
    if (!rc) rc = check_attr_dups(L, n, op_type);
    /* `layout` on MaxPool and GlobalAveragePool is gpuc's own (passes/layout_nhwc.c), not ONNX's */
    if (!rc && (op == GPUC_OP_MAXPOOL || op == GPUC_OP_GLOBALAVERAGEPOOL) && gpuc_attr(n, "layout"))
      rc = gpuc_err_set(e, "%s: node '%s' (%s): %s has no attribute 'layout'", g->path, nname, op_type, op_type);
    for (size_t k = 0; k < nout && !rc; k++) {
      if (!valid_name(np->output[k])) continue;
      char what[1024];
      snprintf(what, sizeof what, "node '%s' (%s) output %zu", nname, op_type, k);
      int vi = define_value(L, np->output[k], what);
      if (vi < 0) { rc = -1; break; }
      n = &g->nodes[ni];
      n->out[k] = vi;
      g->values[vi].producer = ni;
    }
  }
  /* then resolve inputs */
  for (size_t i = 0; i < fn->n && !rc; i++) {
    if (node_index[i] < 0) continue;
    const Onnx__NodeProto *np = fn->node[i];
    Node *n = &g->nodes[node_index[i]];
    for (int k = 0; k < n->nin; k++) {
      if (!valid_name(np->input[k])) continue;
      int vi = map_get(&L->names, np->input[k]);
      if (vi < 0)
        { rc = gpuc_err_set(e, "%s: node '%s' (%s): input '%s' is not produced by any node, "
                            "initializer or graph input", g->path, n->name, gpuc_op_name(n),
                            np->input[k]); break; }
      n->in[k] = vi;
    }
  }
  free(node_index);
  if (rc) return rc;

  /* Constant nodes become constant values. All are converted before the
   * node array is compacted: failing halfway through the compaction would
   * leave nodes listed twice, and their attribute tensors freed twice. */
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (n->op != GPUC_OP_CONSTANT) continue;
    Value *v = &g->values[n->out[0]];
    if (constant_value(L, n, "Constant", v)) return -1;
    v->is_const = true;
    v->producer = -1;
  }
  int kept = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = &g->nodes[i];
    if (n->op == GPUC_OP_CONSTANT) {
      /* dropped from the graph, so gpuc_graph_free will not see these */
      for (int k = 0; k < n->nattr; k++) {
        gpuc_tensor_free(n->attrs[k].t);
        n->attrs[k].t = NULL;
      }
      continue;
    }
    g->nodes[kept] = *n;
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] >= 0) g->values[n->out[k]].producer = kept;
    kept++;
  }
  g->nnodes = kept;

  /* outputs */
  if (gp->n_output == 0) return gpuc_err_set(e, "%s: the graph has no outputs", g->path);
  g->outputs = gpuc_arena_alloc(&g->arena, sizeof(int) * (gp->n_output + 1));
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *name = gp->output[i]->name;
    if (!valid_name(name)) return gpuc_err_set(e, "%s: graph output #%zu has no name", g->path, i);
    int vi = map_get(&L->names, name);
    if (vi < 0)
      return gpuc_err_set(e, "%s: graph output '%s' is never produced", g->path, name);
    g->values[vi].is_output = true;
    g->outputs[g->noutputs++] = vi;
  }
  return 0;
}

static int64_t default_opset(const Onnx__ModelProto *mp, GpucErr *e, const char *path) {
  int64_t opset = -1;
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *os = mp->opset_import[i];
    const char *d = os->domain ? os->domain : "";
    if (!*d || !strcmp(d, "ai.onnx")) opset = os->has_version ? os->version : 1;
  }
  if (mp->n_opset_import == 0) opset = 1; /* IR v1-2 models have no opset_import */
  /* only other domains imported: their nodes are refused as unsupported */
  if (opset == -1) return 0;
  if (opset < 1 || opset > 30) {
    gpuc_err_set(e, "%s: default-domain opset %lld is not supported (1..30)", path, (long long)opset);
    return -1;
  }
  return opset;
}

static Graph *load_buffer(const uint8_t *buf, size_t len, const char *path, const char *model_dir,
                          const GpucShapeBind *binds, int nbinds, GpucErr *e);

Graph *gpuc_onnx_load(const char *path, const GpucShapeBind *binds, int nbinds, GpucErr *e) {
  uint8_t *buf;
  size_t len;
  if (gpuc_read_file(path, GPUC_MODEL_MAX_BYTES, &buf, &len, e)) return NULL;
  if (len == 0) { free(buf); gpuc_err_set(e, "%s: empty file", path); return NULL; }
  char dirbuf[PATH_MAX];
  snprintf(dirbuf, sizeof dirbuf, "%s", path);
  Graph *g = load_buffer(buf, len, path, dirname(dirbuf), binds, nbinds, e);
  free(buf);
  return g;
}

Graph *gpuc_onnx_load_bytes(const void *data, size_t len, const char *what, const GpucShapeBind *binds, int nbinds,
                            GpucErr *e) {
  if (len == 0) { gpuc_err_set(e, "%s: empty model", what); return NULL; }
  if ((int64_t)len > GPUC_MODEL_MAX_BYTES) { gpuc_err_set(e, "%s: model larger than 4 GiB", what); return NULL; }
  return load_buffer(data, len, what, NULL, binds, nbinds, e);
}

/* model_dir: where external data may live; NULL allows none. */
static Graph *load_buffer(const uint8_t *buf, size_t len, const char *path, const char *model_dir,
                          const GpucShapeBind *binds, int nbinds, GpucErr *e) {
  if (gpuc_proto_scan(buf, len, path, e)) return NULL;
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
  if (!mp) { gpuc_err_set(e, "%s: not a valid ONNX model (protobuf decoding failed)", path); return NULL; }
  Graph *g = NULL;
  Loader L = {0};
  L.model_dir = model_dir;
  L.e = e;
  if (!mp->graph) { gpuc_err_set(e, "%s: the model has no graph", path); goto fail; }
  if (!mp->has_ir_version || mp->ir_version < 1) {
    gpuc_err_set(e, "%s: the model has no ir_version", path);
    goto fail;
  }
  int64_t opset = default_opset(mp, e, path);
  if (opset < 0) goto fail;
  L.no_default_opset = opset == 0;
  g = gpuc_graph_new(path);
  if (!g) { gpuc_err_set(e, "%s: out of memory", path); goto fail; }
  g->opset = opset;
  L.g = g;
  GpucFlatNodes flat;
  if (gpuc_onnx_inline_functions(mp, opset, path, &flat, e)) { gpuc_flat_nodes_free(&flat); goto fail; }
  int crc = convert_graph(&L, mp->graph, &flat);
  gpuc_flat_nodes_free(&flat);
  if (crc) goto fail;
  for (int i = 0; i < nbinds; i++)
    if (gpuc_graph_bind_shape(g, binds[i].name, binds[i].rank, binds[i].dims, e)) goto fail;
  if (gpuc_graph_bind_symbols(g, e)) goto fail;
  if (gpuc_graph_toposort(g, e) || gpuc_graph_verify(g, e) || gpuc_graph_infer(g, e)) goto fail;
  /* after inference: the expansion depends on X's rank */
  if (gpuc_onnx_expand_rotary(g, e)) goto fail;
  map_free(&L.names);
  onnx__model_proto__free_unpacked(mp, NULL);
  return g;
fail:
  map_free(&L.names);
  gpuc_graph_free(g);
  onnx__model_proto__free_unpacked(mp, NULL);
  return NULL;
}
