/* gpuc IR: dtypes, tensors, graphs, the op table and the context every op
 * function (shape inference, reference kernel, later lowering) receives.
 *
 * Ownership: a Graph owns its values, nodes, attributes and constant data.
 * Nodes and values refer to each other by index, never by pointer, so a
 * graph can be copied, dumped and serialized without fixing pointers.
 * The IR knows nothing of ONNX protobuf or CUDA. */
#ifndef GPUC_IR_H
#define GPUC_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define GPUC_MAX_RANK 8          /* ranks beyond this are rejected at import */
#define GPUC_MAX_IO 4096         /* inputs/outputs per node (Concat/Sum/...) */

/* ---- errors ------------------------------------------------------------ */
/* Bad input gets a message and a -1 return, all the way up to the CLI
 * (exit 1). Broken invariants abort with file and line (GPUC_ASSERT). */
typedef struct GpucErr {
  char msg[1024];
  bool unsupported;              /* op/dtype outside the supported set */
  bool out_of_memory;            /* the GPU lacks the memory asked for (set after gpuc_err_set) */
} GpucErr;

int gpuc_err_set(GpucErr *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int gpuc_err_unsupported(GpucErr *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prepend "prefix: " to e->msg (keeps the unsupported and out_of_memory flags). */
int gpuc_err_prefix(GpucErr *e, const char *prefix);
void gpuc_panic(const char *file, int line, const char *what)
    __attribute__((noreturn));
#define GPUC_ASSERT(x) \
  do { if (!(x)) gpuc_panic(__FILE__, __LINE__, #x); } while (0)

/* ---- dtypes ------------------------------------------------------------ */
/* DT(ENUM, name, bytes, is_float, is_signed) */
#define GPUC_DTYPES(DT)            \
  DT(F32, "f32", 4, 1, 1)          \
  DT(F16, "f16", 2, 1, 1)          \
  DT(BF16, "bf16", 2, 1, 1)        \
  DT(F64, "f64", 8, 1, 1)          \
  DT(I8, "i8", 1, 0, 1)            \
  DT(U8, "u8", 1, 0, 0)            \
  DT(I16, "i16", 2, 0, 1)          \
  DT(U16, "u16", 2, 0, 0)          \
  DT(I32, "i32", 4, 0, 1)          \
  DT(U32, "u32", 4, 0, 0)          \
  DT(I64, "i64", 8, 0, 1)          \
  DT(U64, "u64", 8, 0, 0)          \
  DT(BOOL, "bool", 1, 0, 0)        \
  DT(F8E4M3, "f8e4m3", 1, 1, 1)

typedef enum GpucDType {
  GPUC_DT_UNDEF = 0,
#define DT_ENUM(E, n, b, f, s) GPUC_DT_##E,
  GPUC_DTYPES(DT_ENUM)
#undef DT_ENUM
  GPUC_DT_COUNT
} GpucDType;

const char *gpuc_dtype_name(GpucDType dt);
size_t gpuc_dtype_size(GpucDType dt);
bool gpuc_dtype_is_float(GpucDType dt);
bool gpuc_dtype_is_signed(GpucDType dt);
bool gpuc_dtype_is_int(GpucDType dt); /* integer, not bool */

float gpuc_f16_to_f32(uint16_t h);
uint16_t gpuc_f32_to_f16(float f);     /* round to nearest even */
float gpuc_bf16_to_f32(uint16_t h);
uint16_t gpuc_f32_to_bf16(float f);    /* round to nearest even */
/* OCP FP8 E4M3 ("fn": no infinities, 0x7f/0xff NaN, max 448), ir/dtype.c */
float gpuc_f8e4m3_to_f32(uint8_t b);
uint8_t gpuc_f32_to_f8e4m3(float f);   /* round to nearest even, saturate to +-448, NaN -> 0x7f */

/* ---- tensors ----------------------------------------------------------- */
/* Dense, row-major, contiguous. dims[i] == -1 means unknown (symbolic or not
 * yet inferred); rank == -1 means the rank is unknown. data == NULL means the
 * values are not known (only dtype/shape are). */
typedef struct Tensor {
  GpucDType dt;
  int rank;
  int64_t dims[GPUC_MAX_RANK];
  void *data;
} Tensor;

/* Largest single tensor the host side will ever allocate (reference executor,
 * constant folding, model loading). Larger requests fail with a message. */
#define GPUC_MAX_TENSOR_BYTES ((int64_t)2 << 30)

bool gpuc_shape_known(const Tensor *t);       /* rank and every dim known */
int64_t gpuc_numel(const Tensor *t);          /* -1 if unknown or overflow */
/* numel with overflow checking; -1 on overflow/negative/unknown */
int64_t gpuc_shape_numel(int rank, const int64_t *dims);
/* Allocate data for t's (known) shape; fails with a message past the cap. */
int gpuc_tensor_alloc(Tensor *t, GpucErr *e);
Tensor *gpuc_tensor_new(GpucDType dt, int rank, const int64_t *dims, GpucErr *e);
void gpuc_tensor_free(Tensor *t);   /* frees data and the struct */
Tensor *gpuc_tensor_clone(const Tensor *t, GpucErr *e);
size_t gpuc_tensor_bytes(const Tensor *t);
void gpuc_set_shape(Tensor *t, GpucDType dt, int rank, const int64_t *dims);
void gpuc_shape_str(const Tensor *t, char *buf, size_t n); /* "1x3x224x224" */
/* dst (its data allocated here, the caller frees it) = src (rank 4, data
 * known) with dims permuted: dst.dims[i] = src.dims[perm[i]]. NCHW <-> NHWC. */
int gpuc_tensor_permute4(const Tensor *src, const int perm[4], Tensor *dst, GpucErr *e);

/* Element access through the widest type; fine for reference kernels. */
double gpuc_get_f64(const Tensor *t, int64_t i);
void gpuc_set_f64(Tensor *t, int64_t i, double v);
int64_t gpuc_get_i64(const Tensor *t, int64_t i);
void gpuc_set_i64(Tensor *t, int64_t i, int64_t v);
/* 2:4 structured sparsity (--prune 2:4): at most 2 nonzeros in every group
 * of 4 along axis kaxis of a 2-D t with data (dims[kaxis] a multiple of 4). */
bool gpuc_tensor_is_24_sparse(const Tensor *t, int kaxis);
/* Copy t as f32 into a new malloc'ed buffer (for float kernels). */
float *gpuc_to_f32(const Tensor *t, GpucErr *e);
/* Store f32 values into t, converting to t->dt. */
void gpuc_from_f32(Tensor *t, const float *src);

/* ---- attributes -------------------------------------------------------- */
typedef enum GpucAttrKind {
  GPUC_ATTR_FLOAT, GPUC_ATTR_INT, GPUC_ATTR_STRING, GPUC_ATTR_TENSOR,
  GPUC_ATTR_FLOATS, GPUC_ATTR_INTS, GPUC_ATTR_STRINGS
} GpucAttrKind;

typedef struct Attr {
  const char *name;
  GpucAttrKind kind;
  float f;
  int64_t i;
  const char *s;                /* STRING, NUL-terminated */
  int n;                        /* count for FLOATS/INTS/STRINGS */
  float *floats;
  int64_t *ints;
  const char **strings;
  Tensor *t;                    /* TENSOR */
} Attr;

/* ---- op table ---------------------------------------------------------- */
enum {
  GPUC_OPF_ELEMWISE = 1 << 0,   /* out[i] depends on in[i] (with broadcast) */
  GPUC_OPF_REDUCE = 1 << 1,
  GPUC_OPF_LAYOUT = 1 << 2,     /* layout-sensitive (NCHW semantics) */
  GPUC_OPF_GRAD = 1 << 3,       /* has a gradient rule */
  GPUC_OPF_SHAPE = 1 << 4,      /* output data depends only on input shapes */
  GPUC_OPF_INTERNAL = 1 << 5,   /* made by passes only; never read from a model */
};

/* FusedConv's attribute `layout` (passes/layout_nhwc.c sets it): NCHW, or
 * NHWC with X, Z, Y [N,H,W,C] and W [K,R,S,C/groups] (bias stays [K]).
 * GPUC_NCHW_TO_NHWC / GPUC_NHWC_TO_NCHW are the Transpose perms between them. */
enum { GPUC_LAYOUT_NCHW = 0, GPUC_LAYOUT_NHWC = 1 };
#define GPUC_NCHW_TO_NHWC {0, 2, 3, 1}
#define GPUC_NHWC_TO_NCHW {0, 3, 1, 2}

typedef enum GpucOp {
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) GPUC_OP_##E,
#include "ops.def"
#undef OP
  GPUC_OP_COUNT
} GpucOp;

typedef struct OpCtx OpCtx;
typedef int (*GpucOpFn)(OpCtx *c);

typedef struct OpInfo {
  const char *name;             /* ONNX op_type */
  int min_in, max_in;           /* max_in < 0: variadic */
  int min_out, max_out;
  unsigned flags;
  GpucOpFn infer;               /* dtype/shape inference (ir/infer_*.c) */
} OpInfo;

extern const OpInfo gpuc_ops[GPUC_OP_COUNT];
int gpuc_op_lookup(const char *onnx_name); /* -1 if not in the table */

/* ---- graph ------------------------------------------------------------- */
typedef struct Value {
  const char *name;
  Tensor t;                     /* dtype, shape, constant data if known */
  const char *sym[GPUC_MAX_RANK]; /* names of symbolic dims (graph inputs) */
  int producer;                 /* node index, or -1 */
  bool is_input, is_output, is_param, is_const;
} Value;

typedef struct Node {
  GpucOp op;
  const char *name;             /* never NULL: ONNX name or "#<index>" */
  int nin, nout;
  int *in;                      /* value indices, -1 = optional input absent */
  int *out;                     /* value indices, -1 = optional output unused */
  int nattr;
  Attr *attrs;
  /* > 0: member of elementwise fusion group `fuse_group`, which codegen
   * runs as one kernel (passes/fuse_elementwise.c); 0: on its own */
  int fuse_group;
} Node;

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
  ArenaBlock *head;
  size_t used_total;
} Arena;
void *gpuc_arena_alloc(Arena *a, size_t n); /* zeroed, 16-aligned; NULL on OOM */
char *gpuc_arena_strdup(Arena *a, const char *s, size_t n);
void gpuc_arena_free(Arena *a);

typedef struct Graph {
  Arena arena;                  /* names, index arrays, attributes */
  const char *path;             /* model file, for messages */
  int64_t opset;                /* default-domain opset */
  Value *values;
  int nvalues, cap_values;
  Node *nodes;                  /* topologically sorted after import */
  int nnodes, cap_nodes;
  int *inputs;                  /* graph inputs (not initializers) */
  int ninputs;
  int *outputs;
  int noutputs;
} Graph;

Graph *gpuc_graph_new(const char *path);
void gpuc_graph_free(Graph *g);  /* frees everything, constant data included */
int gpuc_graph_add_value(Graph *g, const char *name); /* -1 on OOM */
int gpuc_graph_find_value(const Graph *g, const char *name); /* -1 if none */
int gpuc_graph_add_node(Graph *g, GpucOp op, const char *name, int nin, int nout);
/* Remove the nodes with drop[i] set (freeing their attribute tensors),
 * keeping the order of the rest; every value's producer is recomputed
 * (outputs of removed nodes get -1 unless a kept node writes them).
 * Returns the number removed. */
int gpuc_graph_remove_nodes(Graph *g, const bool *drop);
/* Per value: how many node input slots read it (count[v]), and the last
 * node reading it (last[v], -1 if none; last may be NULL). Arrays hold
 * g->nvalues entries; counts do not include graph outputs. */
void gpuc_graph_count_readers(const Graph *g, int *count, int *last);

/* Sort nodes topologically; fails naming a node on a cycle. */
int gpuc_graph_toposort(Graph *g, GpucErr *e);
/* Run shape/dtype inference over the graph; fails on inconsistent shapes. */
int gpuc_graph_infer(Graph *g, GpucErr *e);
/* The same for node i alone, from its inputs as they are now (constant
 * folding re-infers each node as it goes, so a whole shape chain folds in
 * one sweep). */
int gpuc_node_infer(Graph *g, int i, GpucErr *e);
/* Inference refuses graph inputs and outputs over GPUC_MAX_TENSOR_BYTES but
 * lets intermediate values through (a fusion may remove them); this refuses
 * any node output still over it, naming the node. gpuc_passes_run calls it
 * last, so what reaches codegen or the reference fits. */
int gpuc_graph_check_sizes(const Graph *g, GpucErr *e);
/* Why value v has no static shape, into buf: its node, and the chain of
 * producers back to where the unknown starts (ir/explain_shape.c). */
void gpuc_explain_unknown_shape(const Graph *g, int v, char *buf, size_t n);
/* Structural checks: indices in range, single producers, acyclic order. */
int gpuc_graph_verify(const Graph *g, GpucErr *e);
/* Turn graph input NAME into a constant holding a copy of value (checked
 * against the input's dtype and known dims). */
int gpuc_graph_freeze_input(Graph *g, const char *name, const Tensor *value, GpucErr *e);
/* Bind symbolic/unknown dims of input NAME to dims. */
int gpuc_graph_bind_shape(Graph *g, const char *name, int rank,
                          const int64_t *dims, GpucErr *e);

/* After the binds: every input dim named by a symbol (ONNX dim_param)
 * that a bind made known gives its value to the other input dims of that
 * name ('batch' bound on input_ids binds attention_mask's 'batch' too);
 * two binds that disagree on one symbol are an error. */
int gpuc_graph_bind_symbols(Graph *g, GpucErr *e);
/* After the binds: every dim of an input that is still unknown (and of
 * known rank) becomes 1, as trtexec does; returns how many, and says which
 * in note (ir/default_dims.c). Re-infer the graph after. */
int gpuc_graph_default_dims(Graph *g, char *note, size_t n);

/* ---- attribute lookup -------------------------------------------------- */
const Attr *gpuc_attr(const Node *n, const char *name);
int64_t gpuc_attr_i(const Node *n, const char *name, int64_t dflt);
float gpuc_attr_f(const Node *n, const char *name, float dflt);
const char *gpuc_attr_s(const Node *n, const char *name, const char *dflt);
/* INTS attribute: returns count (or -1 if absent) and sets *v. */
int gpuc_attr_ints(const Node *n, const char *name, const int64_t **v);
int gpuc_attr_floats(const Node *n, const char *name, const float **v);

/* ---- the context one op function gets --------------------------------- */
/* Shape inference: in[i] carries dtype/shape and, when known (constants at
 * compile time, everything at run time), data. out[i] gets dtype/shape.
 * Reference kernels: in[i] have data, out[i] are allocated with the shapes
 * inference produced. in[i] == NULL for an absent optional input;
 * out[i] == NULL for an unused optional output. */
struct OpCtx {
  const Graph *g;
  const Node *n;
  int nin, nout;
  const Tensor **in;
  Tensor **out;
  GpucErr *err;
  bool runtime;                 /* true inside an executor: all data known */
};

/* Formats "<file>: node '<name>' (<Op>): <reason>" into c->err; returns -1. */
int gpuc_op_fail(OpCtx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int gpuc_op_unsupported(OpCtx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *gpuc_op_name(const Node *n);

/* Text dump and summary (gpuc inspect). */
#include <stdio.h>
void gpuc_graph_dump(const Graph *g, FILE *f);
void gpuc_graph_summary(const Graph *g, FILE *f);

#endif
