/* ONNX model-local functions inlined at import (frontend/onnx_functions.c).
 * Models are built here with the protobuf-c structs, written under WORKDIR,
 * loaded with gpuc_onnx_load and, when valid, run on the CPU reference and
 * compared with the values the function body defines (exact: f32 math
 * on a few numbers). Hostile ones must fail with a message naming the
 * file and the reason; `GPUC inspect` on them must exit 1 with one line.
 *   usage: test_functions GPUC WORKDIR */
#include "frontend.h"
#include "onnx.pb-c.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "check.h"

static const char *gpuc_bin, *workdir;

/* ---- a tiny arena for the protobuf structs of one model ---- */
static void *pool[4096];
static int npool;
static void *P(size_t n) {
  if (npool == (int)(sizeof pool / sizeof pool[0])) { fprintf(stderr, "pool full\n"); exit(2); }
  void *p = calloc(1, n);
  if (!p) exit(2);
  return pool[npool++] = p;
}
static void pool_free(void) { while (npool) free(pool[--npool]); }
static char *S(const char *s) { char *d = P(strlen(s) + 1); strcpy(d, s); return d; }

/* "a,b,,c" -> list (empty entries kept: absent optionals) */
static char **names(const char *csv, size_t *n) {
  *n = 0;
  if (!csv) return NULL;
  char **v = P(sizeof(char *) * 64);
  const char *p = csv;
  for (;;) {
    const char *q = strchr(p, ',');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    char *s = P(len + 1);
    memcpy(s, p, len);
    v[(*n)++] = s;
    if (!q) break;
    p = q + 1;
  }
  return v;
}

typedef struct { Onnx__NodeProto *v[64]; size_t n; } Nodes;

static Onnx__NodeProto *mk_node(Nodes *list, const char *domain, const char *op, const char *ins,
                                const char *outs) {
  Onnx__NodeProto *n = P(sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = S(op);
  n->domain = S(domain);
  n->input = names(ins, &n->n_input);
  n->output = names(outs, &n->n_output);
  n->attribute = P(sizeof(void *) * 8);
  list->v[list->n++] = n;
  return n;
}

static Onnx__AttributeProto *mk_attr(Onnx__NodeProto *n, const char *name) {
  Onnx__AttributeProto *a = P(sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = S(name);
  n->attribute[n->n_attribute++] = a;
  return a;
}
static void attr_f(Onnx__NodeProto *n, const char *name, float f) {
  Onnx__AttributeProto *a = mk_attr(n, name);
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT; a->has_f = 1; a->f = f;
}
static void attr_ref(Onnx__NodeProto *n, const char *name, const char *ref, int type) {
  Onnx__AttributeProto *a = mk_attr(n, name);
  a->ref_attr_name = S(ref);
  a->has_type = 1; a->type = type;
}

static Onnx__OperatorSetIdProto *mk_opset(const char *domain, int64_t v) {
  Onnx__OperatorSetIdProto *o = P(sizeof *o);
  onnx__operator_set_id_proto__init(o);
  o->domain = S(domain); o->has_version = 1; o->version = v;
  return o;
}

typedef struct { Onnx__FunctionProto *v[64]; size_t n; } Fns;

/* function domain:name(ins) -> outs with attributes attrs (csv) */
static Onnx__FunctionProto *mk_fn(Fns *fns, const char *domain, const char *name, const char *ins,
                                  const char *outs, const char *attrs, Nodes *body, int64_t opset) {
  Onnx__FunctionProto *f = P(sizeof *f);
  onnx__function_proto__init(f);
  f->name = S(name); f->domain = S(domain);
  f->input = names(ins, &f->n_input);
  f->output = names(outs, &f->n_output);
  f->attribute = names(attrs, &f->n_attribute);
  f->node = body->v; f->n_node = body->n;
  f->opset_import = P(sizeof(void *) * 2);
  f->opset_import[f->n_opset_import++] = mk_opset("", opset);
  fns->v[fns->n++] = f;
  return f;
}

/* attribute_proto (field 11 of IR 9, unknown to the old onnx.proto): a
 * default carried as an unknown field, which protobuf-c writes back out */
static void fn_default_f(Onnx__FunctionProto *f, const char *name, float v) {
  Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  a.name = (char *)name; a.has_type = 1; a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a.has_f = 1; a.f = v;
  size_t len = onnx__attribute_proto__get_packed_size(&a);
  GPUC_ASSERT(len < 128); /* protobuf-c keeps the length prefix in the bytes: one byte here */
  uint8_t *buf = P(len + 1);
  buf[0] = (uint8_t)len;
  onnx__attribute_proto__pack(&a, buf + 1);
  ProtobufCMessageUnknownField *u = P(sizeof *u);
  u->tag = 11; u->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED; u->len = len + 1; u->data = buf;
  f->base.n_unknown_fields = 1;
  f->base.unknown_fields = u;
}

static Onnx__ValueInfoProto *vi_f32(const char *name, int64_t n) {
  Onnx__ValueInfoProto *v = P(sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = S(name);
  Onnx__TypeProto *t = P(sizeof *t);
  onnx__type_proto__init(t);
  Onnx__TypeProto__Tensor *tt = P(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1; tt->elem_type = 1;
  Onnx__TensorShapeProto *sh = P(sizeof *sh);
  onnx__tensor_shape_proto__init(sh);
  Onnx__TensorShapeProto__Dimension *d = P(sizeof *d);
  onnx__tensor_shape_proto__dimension__init(d);
  d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE; d->dim_value = n;
  sh->dim = P(sizeof(void *)); sh->dim[0] = d; sh->n_dim = 1;
  tt->shape = sh;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE; t->tensor_type = tt;
  v->type = t;
  return v;
}

/* A model: inputs (csv) and outputs (csv), all f32 [4]; writes FILE. */
static char *write_model(const char *file, const char *ins, const char *outs, Nodes *graph_nodes,
                         Fns *fns, int64_t opset) {
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g";
  g.node = graph_nodes->v; g.n_node = graph_nodes->n;
  size_t ni, no;
  char **in = names(ins, &ni), **out = names(outs, &no);
  g.input = P(sizeof(void *) * ni); g.output = P(sizeof(void *) * no);
  for (size_t i = 0; i < ni; i++) g.input[g.n_input++] = vi_f32(in[i], 4);
  for (size_t i = 0; i < no; i++) g.output[g.n_output++] = vi_f32(out[i], 4);
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1; m.ir_version = 8;
  m.graph = &g;
  Onnx__OperatorSetIdProto *os[2] = {mk_opset("", opset), mk_opset("custom", 1)};
  m.opset_import = os; m.n_opset_import = 2;
  m.functions = fns->v; m.n_functions = fns->n;
  size_t len = onnx__model_proto__get_packed_size(&m);
  uint8_t *buf = P(len);
  onnx__model_proto__pack(&m, buf);
  char *path = P(strlen(workdir) + strlen(file) + 2);
  sprintf(path, "%s/%s", workdir, file);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
  fclose(f);
  return path;
}

/* ---- checks ---- */
/* Run the model on x = {1, -2, 3, 0.5} (every input) and compare output k
 * with want[k][0..3]. */
static void run_and_compare(const char *what, const char *path, int nout, const float want[][4]) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "%s: load failed: %s", what, e.msg);
  if (!g) return;
  static const float xs[4] = {1, -2, 3, 0.5f};
  Tensor *ins[8] = {0}, *outs[8] = {0};
  int64_t four = 4;
  for (int i = 0; i < g->ninputs; i++) {
    ins[i] = calloc(1, sizeof(Tensor));
    gpuc_set_shape(ins[i], GPUC_DT_F32, 1, &four);
    gpuc_tensor_alloc(ins[i], &e);
    memcpy(ins[i]->data, xs, sizeof xs);
  }
  int rc = gpuc_ref_run(g, (const Tensor *const *)ins, outs, &e);
  CHECK(rc == 0, "%s: run failed: %s", what, e.msg);
  for (int k = 0; rc == 0 && k < nout; k++)
    for (int j = 0; j < 4; j++) {
      float got = ((float *)outs[k]->data)[j];
      CHECK(fabsf(got - want[k][j]) <= 1e-6f * (1 + fabsf(want[k][j])), "%s: output %d[%d] = %g, want %g",
            what, k, j, got, want[k][j]);
    }
  for (int i = 0; i < 8; i++) { gpuc_tensor_free(ins[i]); gpuc_tensor_free(outs[i]); }
  gpuc_graph_free(g);
}

/* Loading must fail with a message containing `expect` and the path; the
 * CLI must exit 1 with one stderr line. */
static void must_fail(const char *what, const char *path, const char *expect) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g == NULL, "%s: loaded, want an error containing '%s'", what, expect);
  gpuc_graph_free(g);
  CHECK(strstr(e.msg, expect) && strstr(e.msg, path), "%s: message '%s' lacks '%s' or the path", what,
        e.msg, expect);
  char cmd[8192], errf[4096];
  snprintf(errf, sizeof errf, "%s/stderr.txt", workdir);
  snprintf(cmd, sizeof cmd, "'%s' inspect '%s' >/dev/null 2>'%s'", gpuc_bin, path, errf);
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: gpuc inspect exit status %d, want 1", what,
        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  size_t n = 0;
  unsigned char *b = slurp(errf, &n);
  int lines = 0;
  for (size_t i = 0; b && i < n; i++) lines += b[i] == '\n';
  CHECK(lines == 1, "%s: %d stderr lines, want 1", what, lines);
  free(b);
}

enum { FLOAT_T = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT };

/* custom:ScaleAdd(X, B) = X * alpha + B, alpha by reference (default 3
 * through attribute_proto when `with_default`). Body value 't' also names
 * a main-graph value, which the prefix keeps apart. */
static Onnx__FunctionProto *scale_add(Fns *fns, bool with_default, Nodes *body) {
  body->n = 0;
  Onnx__NodeProto *c = mk_node(body, "", "Constant", NULL, "alpha_c");
  attr_ref(c, "value_float", "alpha", FLOAT_T);
  mk_node(body, "", "Mul", "X,alpha_c", "t");
  mk_node(body, "", "Add", "t,B", "Y");
  Onnx__FunctionProto *f = mk_fn(fns, "custom", "ScaleAdd", "X,B", "Y", with_default ? NULL : "alpha", body, 18);
  if (with_default) fn_default_f(f, "alpha", 3.0f);
  return f;
}

static void test_valid(void) {
  /* two calls, alpha given (2) and defaulted (3); a main-graph 't' */
  Nodes g = {0}, body = {0};
  Fns fns = {0};
  scale_add(&fns, true, &body);
  Onnx__NodeProto *n = mk_node(&g, "custom", "ScaleAdd", "x,x", "t");
  attr_f(n, "alpha", 2.0f);
  mk_node(&g, "custom", "ScaleAdd", "t,x", "y");
  const char *p = write_model("fn_ok.onnx", "x", "y", &g, &fns, 18);
  /* t = 3x, y = 3t + x = 10x */
  static const float want1[1][4] = {{10, -20, 30, 5}};
  run_and_compare("two calls, given and default alpha", p, 1, want1);
  pool_free();

  /* nesting: custom:Outer(A) = (Relu(s), Neg(s)), s = ScaleAdd(A, A)
   * with alpha = Outer's beta; one call leaves the second output unused */
  Nodes g2 = {0}, b1 = {0}, b2 = {0};
  Fns f2 = {0};
  scale_add(&f2, false, &b1);
  Onnx__NodeProto *call = mk_node(&b2, "custom", "ScaleAdd", "A,A", "s");
  attr_ref(call, "alpha", "beta", FLOAT_T);
  mk_node(&b2, "", "Relu", "s", "R");
  mk_node(&b2, "", "Neg", "s", "N");
  mk_fn(&f2, "custom", "Outer", "A", "R,N", "beta", &b2, 18);
  n = mk_node(&g2, "custom", "Outer", "x", "y");
  attr_f(n, "beta", -1.5f);
  n = mk_node(&g2, "custom", "Outer", "x", "z,w");
  attr_f(n, "beta", 1.0f);
  p = write_model("fn_nested.onnx", "x", "y,z,w", &g2, &f2, 18);
  /* y = relu(-0.5 x), z = relu(2x), w = -2x */
  static const float want2[3][4] = {{0, 1, 0, 0}, {2, 0, 6, 1}, {-2, 4, -6, -1}};
  run_and_compare("nested calls, attribute passed down, two outputs", p, 3, want2);
  pool_free();

  /* the erf GELU the TorchScript exporter writes, as a function body */
  Nodes g3 = {0}, b3 = {0};
  Fns f3 = {0};
  Onnx__NodeProto *k = mk_node(&b3, "", "Constant", NULL, "r2");
  attr_f(k, "value_float", 1.41421356f);
  mk_node(&b3, "", "Div", "X,r2", "d");
  mk_node(&b3, "", "Erf", "d", "e");
  k = mk_node(&b3, "", "Constant", NULL, "one");
  attr_f(k, "value_float", 1.0f);
  mk_node(&b3, "", "Add", "e,one", "a");
  mk_node(&b3, "", "Mul", "X,a", "m");
  k = mk_node(&b3, "", "Constant", NULL, "half");
  attr_f(k, "value_float", 0.5f);
  mk_node(&b3, "", "Mul", "m,half", "Y");
  mk_fn(&f3, "custom", "ErfGelu", "X", "Y", NULL, &b3, 20);
  mk_node(&g3, "custom", "ErfGelu", "x", "y");
  mk_node(&g3, "", "Gelu", "x", "z");
  mk_node(&g3, "", "Sub", "y,z", "d");
  p = write_model("fn_gelu.onnx", "x", "d", &g3, &f3, 20);
  static const float want3[1][4] = {{0, 0, 0, 0}};
  run_and_compare("erf GELU function against Gelu-20", p, 1, want3);
  pool_free();
}

static void test_hostile(void) {
  Nodes g = {0}, b = {0}, b2 = {0};
  Fns fns = {0};
  const char *p;

  /* a function that calls itself */
  mk_node(&b, "custom", "Loop1", "X", "Y");
  mk_fn(&fns, "custom", "Loop1", "X", "Y", NULL, &b, 18);
  mk_node(&g, "custom", "Loop1", "x", "y");
  p = write_model("fn_self.onnx", "x", "y", &g, &fns, 18);
  must_fail("self-recursive function", p, "calls itself");
  pool_free();

  /* mutual recursion A -> B -> A */
  g.n = b.n = b2.n = fns.n = 0;
  mk_node(&b, "custom", "B", "X", "Y");
  mk_fn(&fns, "custom", "A", "X", "Y", NULL, &b, 18);
  mk_node(&b2, "custom", "A", "X", "Y");
  mk_fn(&fns, "custom", "B", "X", "Y", NULL, &b2, 18);
  mk_node(&g, "custom", "A", "x", "y");
  p = write_model("fn_mutual.onnx", "x", "y", &g, &fns, 18);
  must_fail("mutually recursive functions", p, "calls itself");
  pool_free();

  /* a call of a function the model does not define (in a function domain) */
  g.n = fns.n = 0;
  scale_add(&fns, true, &b);
  mk_node(&g, "custom", "NoSuchFn", "x", "y");
  p = write_model("fn_missing.onnx", "x", "y", &g, &fns, 18);
  must_fail("unknown function", p, "does not define");
  pool_free();

  /* a reference to an attribute the function does not declare */
  g.n = b.n = fns.n = 0;
  Onnx__NodeProto *c = mk_node(&b, "", "Constant", NULL, "Y");
  attr_ref(c, "value_float", "gamma", FLOAT_T);
  mk_fn(&fns, "custom", "BadRef", "X", "Y", "alpha", &b, 18);
  mk_node(&g, "custom", "BadRef", "x", "y");
  p = write_model("fn_badref.onnx", "x", "y", &g, &fns, 18);
  must_fail("undeclared attribute reference", p, "does not declare");
  pool_free();

  /* the caller gives an attribute the function does not have */
  g.n = fns.n = 0;
  scale_add(&fns, true, &b);
  c = mk_node(&g, "custom", "ScaleAdd", "x,x", "y");
  attr_f(c, "omega", 1.0f);
  p = write_model("fn_extra_attr.onnx", "x", "y", &g, &fns, 18);
  must_fail("undeclared attribute on the call", p, "has no attribute 'omega'");
  pool_free();

  /* a wrong attribute type through the reference */
  g.n = fns.n = 0;
  scale_add(&fns, false, &b);
  c = mk_node(&g, "custom", "ScaleAdd", "x,x", "y");
  Onnx__AttributeProto *a = mk_attr(c, "alpha");
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT; a->has_i = 1; a->i = 2;
  p = write_model("fn_attr_type.onnx", "x", "y", &g, &fns, 18);
  must_fail("attribute type mismatch", p, "has type");
  pool_free();

  /* more inputs than the function takes */
  g.n = fns.n = 0;
  scale_add(&fns, true, &b);
  mk_node(&g, "custom", "ScaleAdd", "x,x,x", "y");
  p = write_model("fn_arity.onnx", "x", "y", &g, &fns, 18);
  must_fail("too many inputs", p, "it takes 2");
  pool_free();

  /* ref_attr_name outside any function */
  g.n = fns.n = 0;
  c = mk_node(&g, "", "Constant", NULL, "y");
  attr_ref(c, "value_float", "alpha", FLOAT_T);
  scale_add(&fns, true, &b);
  p = write_model("fn_ref_top.onnx", "x", "y", &g, &fns, 18);
  must_fail("reference outside a function", p, "outside a function");
  pool_free();

  /* the same function twice */
  g.n = fns.n = 0;
  scale_add(&fns, true, &b);
  scale_add(&fns, true, &b2);
  mk_node(&g, "custom", "ScaleAdd", "x,x", "y");
  p = write_model("fn_twice.onnx", "x", "y", &g, &fns, 18);
  must_fail("function defined twice", p, "defined twice");
  pool_free();

  /* another default-domain opset inside the function */
  g.n = b.n = fns.n = 0;
  mk_node(&b, "", "Relu", "X", "Y");
  mk_fn(&fns, "custom", "R", "X", "Y", NULL, &b, 13);
  mk_node(&g, "custom", "R", "x", "y");
  p = write_model("fn_opset.onnx", "x", "y", &g, &fns, 18);
  must_fail("function of another opset", p, "imports default-domain opset 13");
  pool_free();

  /* a body reading a value of the caller's graph (functions have no outer scope) */
  g.n = b.n = fns.n = 0;
  mk_node(&b, "", "Add", "X,x", "Y");
  mk_fn(&fns, "custom", "Scope", "X", "Y", NULL, &b, 18);
  mk_node(&g, "custom", "Scope", "x", "y");
  p = write_model("fn_scope.onnx", "x", "y", &g, &fns, 18);
  must_fail("body reads an outer value", p, "is not produced");
  pool_free();

  /* nesting 40 deep (F0 -> F1 -> ... -> F39), no recursion */
  static Nodes chain[40];
  g.n = fns.n = 0;
  char nm[16], nx[16];
  for (int i = 0; i < 40; i++) {
    chain[i].n = 0;
    snprintf(nm, sizeof nm, "F%d", i);
    snprintf(nx, sizeof nx, "F%d", i + 1);
    if (i < 39) mk_node(&chain[i], "custom", nx, "X", "Y");
    else mk_node(&chain[i], "", "Relu", "X", "Y");
    mk_fn(&fns, "custom", nm, "X", "Y", NULL, &chain[i], 18);
  }
  mk_node(&g, "custom", "F0", "x", "y");
  p = write_model("fn_deep.onnx", "x", "y", &g, &fns, 18);
  must_fail("functions nested 40 deep", p, "nested deeper than 32");
  pool_free();

  /* 4 calls per level, 16 levels: 4^16 nodes if expanded */
  g.n = fns.n = 0;
  for (int i = 0; i < 16; i++) {
    chain[i].n = 0;
    snprintf(nm, sizeof nm, "E%d", i);
    snprintf(nx, sizeof nx, "E%d", i + 1);
    if (i < 15) {
      mk_node(&chain[i], "custom", nx, "X", "a");
      mk_node(&chain[i], "custom", nx, "a", "b");
      mk_node(&chain[i], "custom", nx, "b", "c");
      mk_node(&chain[i], "custom", nx, "c", "Y");
    } else {
      mk_node(&chain[i], "", "Relu", "X", "Y");
    }
    mk_fn(&fns, "custom", nm, "X", "Y", NULL, &chain[i], 18);
  }
  mk_node(&g, "custom", "E0", "x", "y");
  p = write_model("fn_blowup.onnx", "x", "y", &g, &fns, 18);
  must_fail("exponential expansion", p, "nodes after inlining functions");
  pool_free();
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s GPUC WORKDIR\n", argv[0]); return 2; }
  gpuc_bin = argv[1];
  workdir = argv[2];
  test_valid();
  test_hostile();
  return check_summary();
}
