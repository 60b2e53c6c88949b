/* ONNX model-local functions (ModelProto.functions), inlined at import.
 *
 * A node whose (domain, op_type, overload) names a function of the model is
 * replaced by the function's body: formal inputs and outputs become the
 * caller's names, every other value and node name gets a prefix unique to
 * that call ("fn:<name>.<call>/"), attributes that refer to a function
 * attribute (ref_attr_name) take the caller's value, else the function's
 * default (attribute_proto), else are left out, as ONNX specifies. Bodies
 * may call functions again; the expansion is depth-first, so the flat list
 * keeps the order of the file (convert_graph does not need it: it sorts).
 *
 * The file is untrusted: recursion (a function that calls itself, also
 * through others), nesting deeper than FN_MAX_DEPTH, expansions past
 * FN_MAX_NODES nodes, unknown functions in a function domain, calls with
 * more inputs/outputs than the function has, attributes the function does
 * not declare, references to undeclared attributes, type mismatches and
 * duplicate definitions are errors naming the file, the node and the
 * function. Functions importing another default-domain opset than the
 * model are refused as unsupported (the graph has one opset).
 *
 * onnx.proto of libonnx-dev 1.12 predates IR 9/10: FunctionProto's
 * attribute_proto (field 11) and overload (13), NodeProto's overload (8)
 * arrive as unknown fields and are decoded here. */
#include "frontend_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN_MAX_DEPTH 32            /* nested function calls */
#define FN_MAX_NODES 500000        /* nodes after inlining */
#define FN_MAX_CALL_ATTRS 1024     /* attributes on one function call */
#define FN_NAME_SHOWN 64           /* a function's name in prefixes */

enum { TAG_FN_ATTRIBUTE_PROTO = 11, TAG_FN_OVERLOAD = 13, TAG_NODE_OVERLOAD = 8 };

typedef struct {
  const Onnx__FunctionProto *fp;
  const char *domain, *overload;      /* "" when absent */
  Onnx__AttributeProto **defaults;    /* attribute_proto, decoded */
  size_t ndefaults;
} Fn;

typedef struct Frame {
  const Fn *fn;
  const Onnx__NodeProto *call;        /* the caller, attributes resolved */
  char prefix[FN_NAME_SHOWN + 48];
  int depth;
  const struct Frame *up;
} Frame;

typedef struct {
  GpucFlatNodes *out;
  Fn *fns;
  size_t nfns;
  const char *path;
  GpucErr *e;
  uint64_t calls;                     /* call counter for prefixes */
} Inliner;

static const char *str0(const char *s) { return s ? s : ""; }
static bool is_default_domain(const char *d) { return !*str0(d) || !strcmp(d, "ai.onnx"); }

/* ---- ownership: everything made here is freed with the flat list ---- */
static void *own(Inliner *I, void *p) {
  GpucFlatNodes *f = I->out;
  if (!p) return NULL;
  if (f->nowned == f->capowned) {
    size_t cap = f->capowned ? 2 * f->capowned : 256;
    void **q = realloc(f->owned, cap * sizeof *q);
    if (!q) { free(p); return NULL; }
    f->owned = q;
    f->capowned = cap;
  }
  f->owned[f->nowned++] = p;
  return p;
}

static int oom(Inliner *I) { return gpuc_err_set(I->e, "%s: out of memory", I->path); }

static char *own_printf(Inliner *I, const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = own(I, malloc(la + lb + 1));
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb + 1);
  return s;
}

static int push_node(Inliner *I, const Onnx__NodeProto *np) {
  GpucFlatNodes *f = I->out;
  if (f->n >= FN_MAX_NODES)
    return gpuc_err_set(I->e, "%s: more than %d nodes after inlining functions", I->path, FN_MAX_NODES);
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 1024;
    const Onnx__NodeProto **q = realloc(f->node, cap * sizeof *q);
    if (!q) return oom(I);
    f->node = q;
    f->cap = cap;
  }
  f->node[f->n++] = np;
  return 0;
}

/* ---- unknown fields of the old onnx.proto ---- */
/* protobuf-c keeps an unknown length-delimited field's bytes with their
 * length prefix: the payload of field `tag`, or NULL when absent or when
 * the prefix does not match the bytes (the pre-scan checked the framing). */
static const uint8_t *unknown_payload(const ProtobufCMessageUnknownField *u, size_t *len) {
  if (u->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) return NULL;
  uint64_t v = 0;
  size_t i = 0;
  for (int shift = 0; i < u->len && shift < 64; shift += 7) {
    uint8_t b = u->data[i++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      if (v != u->len - i) return NULL;
      *len = (size_t)v;
      return u->data + i;
    }
  }
  return NULL;
}

static const ProtobufCMessageUnknownField *unknown(const ProtobufCMessage *m, uint32_t tag) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == tag) return &m->unknown_fields[i];
  return NULL;
}

/* a string field: "" when absent; NULL (with a message) when it has a NUL */
static const char *unknown_string(Inliner *I, const ProtobufCMessage *m, uint32_t tag, const char *what) {
  const ProtobufCMessageUnknownField *u = unknown(m, tag);
  if (!u) return "";
  size_t len = 0;
  const uint8_t *d = unknown_payload(u, &len);
  if (!d || memchr(d, 0, len)) {
    gpuc_err_set(I->e, "%s: %s: the overload name is not a string without NUL bytes", I->path, what);
    return NULL;
  }
  char *s = own(I, malloc(len + 1));
  if (!s) { oom(I); return NULL; }
  memcpy(s, d, len);
  s[len] = 0;
  return s;
}

static void free_defaults(Fn *f) {
  for (size_t k = 0; k < f->ndefaults; k++) onnx__attribute_proto__free_unpacked(f->defaults[k], NULL);
  free(f->defaults);
  f->defaults = NULL;
  f->ndefaults = 0;
}

/* FunctionProto.attribute_proto: repeated AttributeProto, field 11 */
static int decode_defaults(Inliner *I, Fn *f) {
  const ProtobufCMessage *m = &f->fp->base;
  size_t n = 0;
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    n += m->unknown_fields[i].tag == TAG_FN_ATTRIBUTE_PROTO;
  if (!n) return 0;
  f->defaults = calloc(n, sizeof *f->defaults);
  if (!f->defaults) return oom(I);
  for (unsigned i = 0; i < m->n_unknown_fields; i++) {
    const ProtobufCMessageUnknownField *u = &m->unknown_fields[i];
    if (u->tag != TAG_FN_ATTRIBUTE_PROTO) continue;
    size_t len = 0;
    const uint8_t *d = unknown_payload(u, &len);
    Onnx__AttributeProto *a = d ? onnx__attribute_proto__unpack(NULL, len, d) : NULL;
    if (a) f->defaults[f->ndefaults++] = a;
    if (!a || !a->name || !*a->name || a->ref_attr_name)
      return gpuc_err_set(I->e, "%s: function '%s': a default attribute (attribute_proto) is not a "
                          "valid named attribute", I->path, f->fp->name);
  }
  return 0;
}

/* ---- the function table ---- */
static const Fn *find_fn(const Inliner *I, const char *domain, const char *name, const char *overload) {
  for (size_t i = 0; i < I->nfns; i++) {
    const Fn *f = &I->fns[i];
    if (!strcmp(f->fp->name, name) && !strcmp(f->domain, domain) && !strcmp(f->overload, overload))
      return f;
  }
  return NULL;
}

static bool domain_has_fns(const Inliner *I, const char *domain) {
  for (size_t i = 0; i < I->nfns; i++)
    if (!strcmp(I->fns[i].domain, domain)) return true;
  return false;
}

static bool has_name(char *const *list, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (list[i] && !strcmp(list[i], s)) return true;
  return false;
}

static const Onnx__AttributeProto *default_attr(const Fn *f, const char *name) {
  for (size_t k = 0; k < f->ndefaults; k++)
    if (!strcmp(f->defaults[k]->name, name)) return f->defaults[k];
  return NULL;
}

static bool declares_attr(const Fn *f, const char *name) {
  return has_name(f->fp->attribute, f->fp->n_attribute, name) || default_attr(f, name);
}

static int check_fn(Inliner *I, Fn *f, int64_t model_opset) {
  const Onnx__FunctionProto *fp = f->fp;
  const char *path = I->path;
  if (!fp->name || !*fp->name) return gpuc_err_set(I->e, "%s: a function has no name", path);
  const char *nm = fp->name;
  if (fp->n_input > GPUC_MAX_IO || fp->n_output > GPUC_MAX_IO)
    return gpuc_err_set(I->e, "%s: function '%s': more than %d inputs or outputs", path, nm, GPUC_MAX_IO);
  if (fp->n_output == 0) return gpuc_err_set(I->e, "%s: function '%s' has no outputs", path, nm);
  for (size_t i = 0; i < fp->n_input + fp->n_output; i++) {
    const char *s = i < fp->n_input ? fp->input[i] : fp->output[i - fp->n_input];
    if (!s || !*s) return gpuc_err_set(I->e, "%s: function '%s': an input or output has no name", path, nm);
    for (size_t j = 0; j < i; j++) {
      const char *t = j < fp->n_input ? fp->input[j] : fp->output[j - fp->n_input];
      if (!strcmp(s, t) && (i >= fp->n_input) == (j >= fp->n_input))
        return gpuc_err_set(I->e, "%s: function '%s': '%s' is listed twice", path, nm, s);
    }
  }
  for (size_t i = 0; i < fp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *os = fp->opset_import[i];
    if (!is_default_domain(os->domain)) continue;
    int64_t v = os->has_version ? os->version : 1;
    if (v != model_opset)
      return gpuc_err_unsupported(I->e, "%s: function '%s' imports default-domain opset %lld, the model "
                                  "%lld (one opset per graph)", path, nm, (long long)v, (long long)model_opset);
  }
  return decode_defaults(I, f);
}

/* ---- expansion ---- */
static int expand(Inliner *I, const Onnx__NodeProto *np, const Frame *fr);

/* A name inside a frame: formal inputs/outputs become the caller's, the
 * rest get the call's prefix; "" (an absent optional) stays "". */
static const char *rename_value(Inliner *I, const Frame *fr, const char *s) {
  if (!fr || !s || !*s) return s ? s : "";
  const Onnx__FunctionProto *fp = fr->fn->fp;
  const Onnx__NodeProto *call = fr->call;
  for (size_t i = 0; i < fp->n_input; i++)
    if (!strcmp(fp->input[i], s)) return i < call->n_input ? str0(call->input[i]) : "";
  for (size_t i = 0; i < fp->n_output; i++)
    if (!strcmp(fp->output[i], s) && i < call->n_output && *str0(call->output[i])) return call->output[i];
  return own_printf(I, fr->prefix, s);
}

/* Attributes of np with ref_attr_name resolved against the frame. */
static int resolve_attrs(Inliner *I, const Onnx__NodeProto *np, const char *nname, const Frame *fr,
                         Onnx__NodeProto *out) {
  size_t n = np->n_attribute;
  out->attribute = own(I, calloc(n + 1, sizeof *out->attribute));
  if (!out->attribute) return oom(I);
  out->n_attribute = 0;
  for (size_t k = 0; k < n; k++) {
    const Onnx__AttributeProto *a = np->attribute[k];
    if (!a->ref_attr_name) { out->attribute[out->n_attribute++] = np->attribute[k]; continue; }
    if (!fr)
      return gpuc_err_set(I->e, "%s: node '%s' (%s): attribute '%s' refers to '%s' outside a function",
                          I->path, nname, str0(np->op_type), str0(a->name), a->ref_attr_name);
    const Fn *f = fr->fn;
    if (!declares_attr(f, a->ref_attr_name))
      return gpuc_err_set(I->e, "%s: node '%s' (%s): attribute '%s' refers to '%s', which function '%s' "
                          "does not declare", I->path, nname, str0(np->op_type), str0(a->name),
                          a->ref_attr_name, f->fp->name);
    const Onnx__AttributeProto *src = NULL;
    for (size_t j = 0; j < fr->call->n_attribute && !src; j++)
      if (!strcmp(str0(fr->call->attribute[j]->name), a->ref_attr_name)) src = fr->call->attribute[j];
    if (!src) src = default_attr(f, a->ref_attr_name);
    if (!src) continue; /* neither given nor defaulted: the attribute is absent */
    if (a->has_type && src->has_type && a->type != src->type)
      return gpuc_err_set(I->e, "%s: node '%s' (%s): attribute '%s' has type %d, the value of '%s' "
                          "given to function '%s' type %d", I->path, nname, str0(np->op_type),
                          str0(a->name), (int)a->type, a->ref_attr_name, f->fp->name, (int)src->type);
    Onnx__AttributeProto *c = own(I, malloc(sizeof *c));
    if (!c) return oom(I);
    *c = *src;
    c->name = a->name;
    c->ref_attr_name = NULL;
    if (!c->has_type && a->has_type) { c->has_type = true; c->type = a->type; }
    out->attribute[out->n_attribute++] = c;
  }
  return 0;
}

/* A call of function f by np (already renamed and resolved in its frame). */
static int inline_call(Inliner *I, const Onnx__NodeProto *np, const char *nname, const Fn *f,
                       const Frame *fr) {
  const Onnx__FunctionProto *fp = f->fp;
  for (const Frame *u = fr; u; u = u->up)
    if (u->fn == f)
      return gpuc_err_set(I->e, "%s: node '%s': function '%s' calls itself (recursion is not allowed)",
                          I->path, nname, fp->name);
  int depth = fr ? fr->depth + 1 : 1;
  if (depth > FN_MAX_DEPTH)
    return gpuc_err_set(I->e, "%s: node '%s': functions nested deeper than %d", I->path, nname, FN_MAX_DEPTH);
  if (np->n_input > fp->n_input || np->n_output > fp->n_output)
    return gpuc_err_set(I->e, "%s: node '%s': calls function '%s' with %zu inputs and %zu outputs, it "
                        "takes %zu and gives %zu", I->path, nname, fp->name, np->n_input, np->n_output,
                        fp->n_input, fp->n_output);
  if (np->n_attribute > FN_MAX_CALL_ATTRS)
    return gpuc_err_set(I->e, "%s: node '%s': more than %d attributes on a function call", I->path, nname,
                        FN_MAX_CALL_ATTRS);
  for (size_t k = 0; k < np->n_attribute; k++) {
    const char *an = str0(np->attribute[k]->name);
    if (!declares_attr(f, an))
      return gpuc_err_set(I->e, "%s: node '%s': function '%s' has no attribute '%s'", I->path, nname,
                          fp->name, an);
    for (size_t j = 0; j < k; j++)
      if (!strcmp(an, str0(np->attribute[j]->name)))
        return gpuc_err_set(I->e, "%s: node '%s': attribute '%s' given twice", I->path, nname, an);
  }
  Frame sub = {.fn = f, .call = np, .depth = depth, .up = fr};
  snprintf(sub.prefix, sizeof sub.prefix, "fn:%.*s.%llu/", FN_NAME_SHOWN, fp->name,
           (unsigned long long)I->calls++);
  for (size_t i = 0; i < fp->n_node; i++)
    if (expand(I, fp->node[i], &sub)) return -1;
  return 0;
}

/* np as seen from frame fr: renamed, attributes resolved; then either a
 * function call (inlined) or a node for convert_graph. */
static int expand(Inliner *I, const Onnx__NodeProto *np, const Frame *fr) {
  char auto_name[32];
  snprintf(auto_name, sizeof auto_name, "#%llu", (unsigned long long)I->out->n);
  const char *nname = np->name && *np->name ? np->name : auto_name;
  Onnx__NodeProto *c = own(I, malloc(sizeof *c));
  if (!c) return oom(I);
  *c = *np;
  if (fr) {
    c->name = own_printf(I, fr->prefix, nname);
    c->input = own(I, calloc(np->n_input + 1, sizeof *c->input));
    c->output = own(I, calloc(np->n_output + 1, sizeof *c->output));
    if (!c->name || !c->input || !c->output) return oom(I);
    for (size_t k = 0; k < np->n_input; k++)
      if (!(c->input[k] = (char *)rename_value(I, fr, np->input[k]))) return oom(I);
    for (size_t k = 0; k < np->n_output; k++)
      if (!(c->output[k] = (char *)rename_value(I, fr, np->output[k]))) return oom(I);
    nname = c->name;
  }
  if (resolve_attrs(I, np, nname, fr, c)) return -1;
  const char *overload = unknown_string(I, &np->base, TAG_NODE_OVERLOAD, nname);
  if (!overload) return -1;
  const char *domain = str0(np->domain), *op = str0(np->op_type);
  const Fn *f = I->nfns ? find_fn(I, domain, op, overload) : NULL;
  if (f) return inline_call(I, c, nname, f, fr);
  if (!is_default_domain(domain) && domain_has_fns(I, domain))
    return gpuc_err_set(I->e, "%s: node '%s': calls function '%s' of domain '%s'%s%s, which the model "
                        "does not define", I->path, nname, op, domain, *overload ? " overload " : "",
                        overload);
  return push_node(I, c);
}

int gpuc_onnx_inline_functions(const Onnx__ModelProto *mp, int64_t model_opset, const char *path,
                               GpucFlatNodes *out, GpucErr *e) {
  memset(out, 0, sizeof *out);
  const Onnx__GraphProto *gp = mp->graph;
  if (mp->n_functions == 0) { /* the common case: the graph's own list */
    out->node = (const Onnx__NodeProto **)gp->node;
    out->n = gp->n_node;
    return 0;
  }
  Inliner I = {.out = out, .path = path, .e = e};
  I.fns = calloc(mp->n_functions, sizeof *I.fns);
  if (!I.fns) return oom(&I);
  int rc = 0;
  for (size_t i = 0; i < mp->n_functions && !rc; i++) {
    Fn *f = &I.fns[I.nfns++];
    f->fp = mp->functions[i];
    f->domain = str0(f->fp->domain);
    f->overload = unknown_string(&I, &f->fp->base, TAG_FN_OVERLOAD, "function");
    if (!f->overload) { rc = -1; break; }
    rc = check_fn(&I, f, model_opset);
    if (!rc && find_fn(&I, f->domain, f->fp->name, f->overload) != f)
      rc = gpuc_err_set(e, "%s: function '%s' of domain '%s' is defined twice", path, f->fp->name, f->domain);
  }
  for (size_t i = 0; i < gp->n_node && !rc; i++) rc = expand(&I, gp->node[i], NULL);
  for (size_t i = 0; i < I.nfns; i++) free_defaults(&I.fns[i]);
  free(I.fns);
  return rc;
}

void gpuc_flat_nodes_free(GpucFlatNodes *f) {
  for (size_t i = 0; i < f->nowned; i++) free(f->owned[i]);
  free(f->owned);
  if (f->cap) free(f->node); /* else it is the graph's own array */
  memset(f, 0, sizeof *f);
}
