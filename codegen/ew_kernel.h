/* Elementwise programs: one kernel computing a DAG of elementwise terms per
 * output element. A single ONNX op (cg_elementwise) is a one-term program;
 * a fusion group (passes/fuse_elementwise.c) is a program with one term per
 * member node, intermediates kept in registers. */
#ifndef GPUC_EW_KERNEL_H
#define GPUC_EW_KERNEL_H
#include "lower_util.h"

enum { EW_MAX_ARGS = 8, EW_MAX_TERMS = 64, EW_MAX_EXT = 96 };

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
  int64_t stride[GPUC_MAX_RANK];
} EwExt;

typedef struct EwProgram {
  int nterms, next;
  EwTerm term[EW_MAX_TERMS];     /* the last term is stored to the output */
  EwExt ext[EW_MAX_EXT];
  const Tensor *y;
  uint32_t ty;
} EwProgram;

/* The type a loaded input is held in before a term converts it: double
 * for f64, long long for integers and bool, float otherwise. */
const char *ew_natural_type(GpucDType dt);
/* Index of external input (tensor, view), added if new; -1 when full. */
int ew_ext(EwProgram *p, uint32_t tensor, const Tensor *view);
/* The same for a strided read (view: dtype and the output's dims). */
int ew_ext_strided(EwProgram *p, uint32_t tensor, const Tensor *view, const int64_t *stride);
/* Emit and launch the program's kernel. */
int cg_ew_program(LowerCtx *c, const EwProgram *p);
#endif
