/* The op table generated from ops.def, and the error helpers op functions
 * use. */
#include "ir.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define OP(E, Name, min_in, max_in, min_out, max_out, flags) int infer_##Name(OpCtx *c);
#include "ops.def"
#undef OP

const OpInfo gpuc_ops[GPUC_OP_COUNT] = {
#define OP(E, Name, min_in, max_in, min_out, max_out, flags) \
  [GPUC_OP_##E] = {#Name, min_in, max_in, min_out, max_out, flags, infer_##Name},
#include "ops.def"
#undef OP
};

int gpuc_op_lookup(const char *onnx_name) {
  for (int i = 0; i < GPUC_OP_COUNT; i++)
    if (strcmp(gpuc_ops[i].name, onnx_name) == 0) return i;
  return -1;
}

const char *gpuc_op_name(const Node *n) {
  return (unsigned)n->op < GPUC_OP_COUNT ? gpuc_ops[n->op].name : "?";
}

static int op_vfail(OpCtx *c, bool unsupported, const char *fmt, va_list ap) {
  char reason[768];
  vsnprintf(reason, sizeof reason, fmt, ap);
  if (c->err) {
    /* through gpuc_err_set, which keeps the message on one line */
    gpuc_err_set(c->err, "%s: node '%s' (%s): %s", c->g ? c->g->path : "<graph>", c->n->name,
                 gpuc_op_name(c->n), reason);
    c->err->unsupported = unsupported;
  }
  return -1;
}

int gpuc_op_fail(OpCtx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  op_vfail(c, false, fmt, ap);
  va_end(ap);
  return -1;
}

int gpuc_op_unsupported(OpCtx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  op_vfail(c, true, fmt, ap);
  va_end(ap);
  return -1;
}
