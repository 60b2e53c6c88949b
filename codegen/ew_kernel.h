/* Elementwise programs: one kernel computing a DAG of elementwise terms per
 * output element. A single ONNX op (cg_elementwise) is a one-term program;
 * a fusion group (passes/fuse_elementwise.c) is a program with one term per
 * member node, intermediates kept in registers. */
#ifndef GPUC_EW_KERNEL_H
#define GPUC_EW_KERNEL_H
#include "lower_util.h"

enum { EW_MAX_ARGS = 8, EW_MAX_TERMS = 64, EW_MAX_EXT = 96, EW_MAX_CAT = 48, EW_MAX_POOL = 4 };

/* What cg_elementwise was asked for while LowerCtx.capture was set. */
typedef struct EwCapture {
  int calls;                     /* cg_elementwise calls seen */
  bool other;                    /* another emitting helper ran: not inlinable */
  int nargs;
  int slot[EW_MAX_ARGS];         /* node input index of each x<k> */
  Tensor view[EW_MAX_ARGS];      /* its dtype and (broadcast view) shape */
  char ct[16];
  char *pre, *expr;              /* malloc'ed; pre may be NULL */
} EwCapture;
void ew_capture_clear(EwCapture *cap);
/* caps[0..n) cleared, then the array freed (NULL: nothing). */
void ew_captures_free(EwCapture *caps, int n);

/* x<k> of a term reads external input `ext`, or the value of term `term`
 * (an earlier one) when ext < 0. */
typedef struct EwArg { int ext, term; } EwArg;
typedef struct EwTerm {
  int nargs;
  EwArg arg[EW_MAX_ARGS];
  const char *ct, *pre, *expr;   /* as cg_elementwise takes them */
  GpucDType dt;                  /* the dtype the node's output has */
} EwTerm;
/* An input tensor read with numpy broadcasting against the output shape,
 * or (strided) through explicit element strides per output dim: a
 * Transpose at the head of a group is read this way, never materialized. */
typedef struct EwExt {
  uint32_t tensor;
  Tensor view;
  bool strided;
  bool reg;                      /* not in memory: the enclosing kernel's register (an epilogue's accumulator) */
  bool cat;                      /* not one tensor: the Concat of EwProgram.cat's pieces (tensor unused) */
  int pool;                      /* > 0: an NHWC AveragePool of tensor, EwProgram.pool[pool - 1] */
  int64_t stride[GPUC_MAX_RANK];
} EwExt;

/* A Concat at the head of a group (passes/fuse_elementwise.c), never
 * written: with the output seen as [outer, run] (run = the elements of one
 * index of the dims before the axis), piece k is [outer, len[k]] and lands
 * at column sum_{j<k} len[j]. The kernel finds a vector's piece by its
 * column (a binary search) and loads it from there; every len is a
 * multiple of the vector, so a vector never straddles two pieces. */
/* An NHWC 2-D AveragePool at the head of a group (PoolFormer's token
 * mixer pool(x) - x): X [N,H,W,C] -> y [N,OH,OW,C], read per output
 * vector of channels by walking the taps in the reference's order
 * (codegen/lower_pool.c's rule: float sums, the divisor the taps inside X,
 * or inside X and its padding with count_include_pad), rounded to X's
 * dtype as the pool's own store would. */
typedef struct EwPool {
  int64_t H, W, C, OH, OW, k[2], stride[2], dil[2], pad_b[2], pad_e[2];
  bool include_pad;
} EwPool;

typedef struct EwCat {
  int n;
  int64_t run;
  uint32_t tensor[EW_MAX_CAT];
  int64_t len[EW_MAX_CAT];
} EwCat;

typedef struct EwProgram {
  int nterms, next;
  EwTerm term[EW_MAX_TERMS];     /* the last term is stored to the output */
  EwExt ext[EW_MAX_EXT];
  const Tensor *y;
  uint32_t ty;
  /* has_reg: graph value reg_value is the enclosing kernel's register, not
   * a tensor (ew_group_program makes it a reg input) */
  bool has_reg;
  int reg_value;
  /* allow_cat: the caller's kernel (cg_ew_program) reads a Concat member
   * as an EXT_CAT input; the row and epilogue kernels do not, and
   * ew_group_program returns 1 (members one by one) for them */
  bool allow_cat;
  EwCat cat;                     /* the one Concat member, when an ext has cat set */
  /* pre_value: graph value computed by the terms already in the program
   * before ew_group_program adds the members' (a norm heading the group,
   * codegen/lower_fused.c): members reading it read term pre_term; -1
   * (with pre_term) when there is none. ew_group_program numbers the
   * members' terms from nterms on. */
  int pre_value, pre_term;
  int npools;
  EwPool pool[EW_MAX_POOL];
} EwProgram;

/* The type a loaded input is held in before a term converts it: double
 * for f64, long long for integers and bool, float otherwise. */
const char *ew_natural_type(GpucDType dt);
/* Index of external input (tensor, view), added if new; -1 when full. */
int ew_ext(EwProgram *p, uint32_t tensor, const Tensor *view);
/* The same for a strided read (view: dtype and the output's dims). */
int ew_ext_strided(EwProgram *p, uint32_t tensor, const Tensor *view, const int64_t *stride);
/* The program as another kernel's epilogue (codegen/lower_int8_gemm.c),
 * y of rows of n elements (its last dim): ew_epilogue_params prints
 * "const T* __restrict__ in<k>, " for each input in memory and puts its
 * tensor in args (returns how many); ew_epilogue_pair prints the code for
 * elements i0_ and i0_ + 1 of one row (i0_ even, n even), which expects
 * i64 i0_, i64 row_, int j0_ (i0_'s column) and reg_[2] (the register
 * input of each) in scope, and stores both to out0 in one 2-element store. */
int ew_epilogue_params(StrBuf *b, const EwProgram *p, uint32_t *args);
void ew_epilogue_pair(StrBuf *b, const EwProgram *p, int64_t n);
/* Emit and launch the program's kernel. */
int cg_ew_program(LowerCtx *c, const EwProgram *p);
/* The program per row of k consecutive elements of y, y rounded to its
 * dtype and quantized per row (QuantizeRows, or QuantizeRowsF8 with f8)
 * into plan tensors tq and ts instead of stored; 1 when the rows do not
 * fit the kernel (then nothing is emitted). */
int cg_ew_rows_quantize(LowerCtx *c, const EwProgram *p, int64_t k, bool f8, uint32_t tq, uint32_t ts);
/* Fill p with the terms of fusion-group members m[0..nm) (each lowered
 * with LowerCtx.capture): 0, 1 when a member is not one inlinable
 * elementwise expression (the caller lowers the members one by one), -1 on
 * error. caps[nm] hold the captures; the caller clears them. */
int ew_group_program(PlanBuilder *pb, const Graph *g, const int *m, int nm, EwProgram *p, EwCapture *caps);
/* reader_group[v] for every value v of g (nvalues entries): the fusion
 * group all its readers share (0: ungrouped), -1 when they differ, -2
 * when nothing reads it. */
void cg_reader_groups(const Graph *g, int *reader_group);
/* The checks of a fusion group of elementwise members (codegen/lower_fused.c):
 * single outputs of one shape, intermediates read by members only. */
bool cg_group_valid(const Graph *g, const int *m, int nm, const int *reader_group);
/* The members lowered as separate nodes, in order. */
int cg_lower_one_by_one(PlanBuilder *pb, const int *m, int nm);
/* A group whose last member is a QuantizeRows(F8) or a norm
 * (passes/fuse_quantize_rows.c), as one row kernel (codegen/lower_row_group.c). */
int cg_lower_row_group(PlanBuilder *pb, const Graph *g, const int *m, int nm, const int *reader_group);
#endif
