/* Reference kernels for BitwiseAnd/Or/Xor/Not-18 and BitShift-11 on the
 * elementwise row engine (ref_ew.h). Integers are loaded into int64 (u64
 * as its bit pattern, narrower types sign- or zero-extended), combined,
 * and narrowed on store by wrapping, so the bits are those of the
 * operation in the element type. BitShift (unsigned types; signed ones
 * from opset 28): a shift by a negative amount or by the type's bit width
 * or more gives 0, or -1 for a right shift of a negative value (numpy's
 * saturation; C leaves it undefined); a right shift of a signed value is
 * arithmetic. */
#include "ref_ew.h"

typedef struct Bits {
  GpucOp op;
  const Tensor *a, *b;
  Tensor *o;
  bool left;     /* BitShift direction */
  bool sgn;      /* signed element type */
  int width;     /* bits of the element type */
} Bits;

/* x and s as loaded: sign-extended for signed types, zero-extended for
 * narrower unsigned ones, u64 as its bit pattern (so a u64 amount >= 2^63
 * is negative here: out of range either way). << wraps on store. */
static int64_t shift(const Bits *p, int64_t x, int64_t s) {
  if (s < 0 || s >= p->width) return !p->left && p->sgn && x < 0 ? -1 : 0;
  if (p->left) return (int64_t)((uint64_t)x << s);
  return p->sgn ? (x < 0 ? ~(~x >> s) : x >> s) : (int64_t)((uint64_t)x >> s);
}

static void bits_row(void *ud, int64_t n, int64_t oo, const int64_t *io, const int64_t *is) {
  const Bits *p = ud;
  int64_t a[EW_BLOCK], b[EW_BLOCK];
  ew_load_i(p->a, io[0], is[0], n, a);
  if (p->b) ew_load_i(p->b, io[1], is[1], n, b);
  for (int64_t i = 0; i < n; i++) {
    switch (p->op) {
    case GPUC_OP_BITWISEAND: a[i] &= b[i]; break;
    case GPUC_OP_BITWISEOR: a[i] |= b[i]; break;
    case GPUC_OP_BITWISEXOR: a[i] ^= b[i]; break;
    case GPUC_OP_BITWISENOT: a[i] = ~a[i]; break;
    case GPUC_OP_BITSHIFT: a[i] = shift(p, a[i], b[i]); break;
    default: GPUC_ASSERT(!"not a bitwise op");
    }
  }
  ew_store_i(p->o, oo, n, a, p->o->dt == GPUC_DT_U64);
}

static int run_bits(OpCtx *c) {
  bool binary = c->n->op != GPUC_OP_BITWISENOT;
  Bits p = {.op = c->n->op, .a = c->in[0], .b = binary ? c->in[1] : NULL, .o = c->out[0],
            .sgn = gpuc_dtype_is_signed(c->in[0]->dt), .width = (int)gpuc_dtype_size(c->in[0]->dt) * 8};
  if (p.op == GPUC_OP_BITSHIFT) {
    int left = gpuc_bitshift_left(c->n);
    if (left < 0) return gpuc_op_fail(c, "direction must be \"LEFT\" or \"RIGHT\"");
    p.left = left;
  }
  return ew_for_rows(c, binary ? 2 : 1, c->in, c->out[0], bits_row, &p);
}

int ref_BitwiseAnd(OpCtx *c) { return run_bits(c); }
int ref_BitwiseOr(OpCtx *c) { return run_bits(c); }
int ref_BitwiseXor(OpCtx *c) { return run_bits(c); }
int ref_BitwiseNot(OpCtx *c) { return run_bits(c); }
int ref_BitShift(OpCtx *c) { return run_bits(c); }
