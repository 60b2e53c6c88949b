/* Shape inference for MatMul, MatMulInteger, Gemm, Einsum and Det, and the
 * Einsum equation parser the reference kernel shares. */
#include "infer_linalg.h"
#include <stdlib.h>
#include <string.h>

/* Broadcast two sizes (-1 = unknown): equal, or one of them is 1. An
 * unknown against a known size > 1 must be that size (or 1). */
static int merge_dim(int64_t x, int64_t y, int64_t *r) {
  if (x == y || y == 1) { *r = x; return 0; }
  if (x == 1) { *r = y; return 0; }
  if (x < 0) { *r = y; return 0; }
  if (y < 0) { *r = x; return 0; }
  return -1;
}

/* Dtypes of MatMul and Gemm (ONNX: floats, 32/64-bit integers). */
static int check_mm_dtype(OpCtx *c, int i) {
  static const GpucDType ok[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64,
                                 GPUC_DT_I32, GPUC_DT_I64, GPUC_DT_U32, GPUC_DT_U64,
                                 GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, i, ok)) return -1;
  if (c->in[i]->dt != c->in[0]->dt)
    return gpuc_op_fail(c, "input %d is %s but input 0 is %s", i, gpuc_dtype_name(c->in[i]->dt),
                        gpuc_dtype_name(c->in[0]->dt));
  return 0;
}

/* ---- MatMul ------------------------------------------------------------ */

int gpuc_matmul_shape(OpCtx *c, const Tensor *a, const Tensor *b, Tensor *y) {
  int ra = a->rank, rb = b->rank;
  if (ra < 1 || rb < 1)
    return gpuc_op_fail(c, "inputs must have rank >= 1 (got ranks %d and %d)", ra, rb);
  int64_t ka = a->dims[ra - 1], kb = rb == 1 ? b->dims[0] : b->dims[rb - 2];
  if (ka >= 0 && kb >= 0 && ka != kb) {
    char sa[160], sb[160];
    gpuc_shape_str(a, sa, sizeof sa);
    gpuc_shape_str(b, sb, sizeof sb);
    return gpuc_op_fail(c, "inner dimensions differ: %s @ %s (%lld vs %lld)", sa, sb,
                        (long long)ka, (long long)kb);
  }
  /* batch dims: all but the last two (none for 1-D), right-aligned */
  int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
  int nbatch = na > nb ? na : nb;
  int64_t dims[GPUC_MAX_RANK];
  for (int d = 0; d < nbatch; d++) {
    int da = d - (nbatch - na), db = d - (nbatch - nb);
    int64_t x = da >= 0 ? a->dims[da] : 1, z = db >= 0 ? b->dims[db] : 1;
    if (merge_dim(x, z, &dims[d]))
      return gpuc_op_fail(c, "batch dimension %d does not broadcast (%lld vs %lld)", d,
                          (long long)x, (long long)z);
  }
  int r = nbatch;
  if (ra >= 2) dims[r++] = a->dims[ra - 2];
  if (rb >= 2) dims[r++] = b->dims[rb - 1];
  y->rank = r;
  memcpy(y->dims, dims, sizeof(int64_t) * (size_t)r);
  return 0;
}

int infer_MatMul(OpCtx *c) {
  if (check_mm_dtype(c, 0) || check_mm_dtype(c, 1)) return -1;
  if (gpuc_matmul_shape(c, c->in[0], c->in[1], c->out[0])) return -1;
  c->out[0]->dt = c->in[0]->dt;
  return 0;
}

/* MatMulBias(A, B[K,N], bias): MatMul's shape; bias holds N values of A's
 * dtype, shaped [N] or [1,..,1,N]. */
int infer_MatMulBias(OpCtx *c) {
  if (infer_MatMul(c)) return -1;
  const Tensor *b = c->in[1], *bias = c->in[2];
  if (b->rank != 2) return gpuc_op_fail(c, "B must be 2-D (got rank %d)", b->rank);
  if (bias->dt != c->in[0]->dt)
    return gpuc_op_fail(c, "bias is %s but A is %s", gpuc_dtype_name(bias->dt), gpuc_dtype_name(c->in[0]->dt));
  if (bias->rank < 1 || bias->rank > c->out[0]->rank)
    return gpuc_op_fail(c, "bias must have rank 1..%d (got %d)", c->out[0]->rank, bias->rank);
  for (int d = 0; d + 1 < bias->rank; d++)
    if (bias->dims[d] != 1) return gpuc_op_fail(c, "bias must be [N] or [1,..,1,N]");
  int64_t nb = bias->dims[bias->rank - 1];
  if (nb >= 0 && b->dims[1] >= 0 && nb != b->dims[1])
    return gpuc_op_fail(c, "bias has %lld values, B has %lld columns", (long long)nb, (long long)b->dims[1]);
  if (!gpuc_has_in(c, 3)) return 0;
  /* R: a residual added after the bias, of Y's dtype and shape */
  const Tensor *r = c->in[3], *y = c->out[0];
  if (gpuc_attr_i(c->n, "activation", 0) != 0)
    return gpuc_op_fail(c, "a residual input R only without activation");
  bool same = r->dt == y->dt && r->rank == y->rank;
  for (int d = 0; same && d < r->rank; d++) same = r->dims[d] == y->dims[d] || r->dims[d] < 0 || y->dims[d] < 0;
  if (!same) return gpuc_op_fail(c, "R must have Y's dtype and shape");
  return 0;
}

/* ---- MatMulInteger ----------------------------------------------------- */

/* A zero point is a scalar (per tensor), or per row of A / per column of
 * B: a 1-D [M] / [N] vector for 2-D inputs, or an N-D tensor shaped like the
 * input with 1 in the K position. `row` selects A's rule. */
static int check_zero_point(OpCtx *c, int zi, int xi, bool row) {
  if (!gpuc_has_in(c, zi)) return 0;
  const Tensor *z = c->in[zi], *x = c->in[xi];
  const char *what = row ? "a_zero_point" : "b_zero_point";
  if (z->dt != x->dt)
    return gpuc_op_fail(c, "%s is %s but its input is %s", what, gpuc_dtype_name(z->dt),
                        gpuc_dtype_name(x->dt));
  int64_t nz = gpuc_numel(z);
  if (nz == 1) return 0;
  if (z->rank == 0) return 0;
  int r = x->rank;
  if (r < 2) return gpuc_op_fail(c, "%s must be a scalar for a 1-D input", what);
  if (z->rank == 1) {
    int64_t want = row ? x->dims[r - 2] : x->dims[r - 1];
    if (z->dims[0] >= 0 && want >= 0 && z->dims[0] != want)
      return gpuc_op_fail(c, "%s has %lld values, expected 1 or %lld", what,
                          (long long)z->dims[0], (long long)want);
    return 0;
  }
  if (z->rank != r) return gpuc_op_fail(c, "%s has rank %d, expected 0, 1 or %d", what, z->rank, r);
  int kpos = row ? r - 1 : r - 2;
  for (int d = 0; d < r; d++) {
    int64_t zd = z->dims[d], xd = x->dims[d];
    if (zd < 0 || xd < 0) continue;
    if (d == kpos ? zd != 1 : (zd != 1 && zd != xd))
      return gpuc_op_fail(c, "%s dimension %d is %lld, does not fit the input's %lld", what, d,
                          (long long)zd, (long long)xd);
  }
  return 0;
}

/* int32 result of (A - a_zp) @ (B - b_zp), A and B u8 or i8. */
int infer_MatMulInteger(OpCtx *c) {
  static const GpucDType ok[] = {GPUC_DT_U8, GPUC_DT_I8, GPUC_DT_UNDEF};
  if (gpuc_check_dtype(c, 0, ok) || gpuc_check_dtype(c, 1, ok)) return -1;
  if (check_zero_point(c, 2, 0, true) || check_zero_point(c, 3, 1, false)) return -1;
  if (gpuc_matmul_shape(c, c->in[0], c->in[1], c->out[0])) return -1;
  c->out[0]->dt = GPUC_DT_I32;
  return 0;
}

/* ---- Gemm -------------------------------------------------------------- */

/* Y[M,N] = alpha * op(A) @ op(B) + beta * C; C broadcasts to [M,N]. */
int infer_Gemm(OpCtx *c) {
  const Tensor *a = c->in[0], *b = c->in[1], *cc = gpuc_has_in(c, 2) ? c->in[2] : NULL;
  if (check_mm_dtype(c, 0) || check_mm_dtype(c, 1) || (cc && check_mm_dtype(c, 2))) return -1;
  if (a->rank != 2 || b->rank != 2)
    return gpuc_op_fail(c, "A and B must be 2-D (got ranks %d and %d)", a->rank, b->rank);
  bool ta = gpuc_attr_i(c->n, "transA", 0) != 0, tb = gpuc_attr_i(c->n, "transB", 0) != 0;
  int64_t m = a->dims[ta ? 1 : 0], ka = a->dims[ta ? 0 : 1];
  int64_t kb = b->dims[tb ? 1 : 0], n = b->dims[tb ? 0 : 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return gpuc_op_fail(c, "inner dimensions differ: op(A) is %lldx%lld, op(B) is %lldx%lld",
                        (long long)m, (long long)ka, (long long)kb, (long long)n);
  if (cc) { /* unidirectional broadcast: each dim of C is 1 or Y's */
    if (cc->rank > 2) return gpuc_op_fail(c, "C must have rank <= 2, not %d", cc->rank);
    int64_t want[2] = {m, n};
    for (int d = 0; d < cc->rank; d++) {
      int64_t cd = cc->dims[d], yd = want[2 - cc->rank + d];
      if (cd >= 0 && yd >= 0 && cd != 1 && cd != yd)
        return gpuc_op_fail(c, "C dimension %d is %lld, does not broadcast to %lldx%lld", d,
                            (long long)cd, (long long)m, (long long)n);
    }
  }
  int64_t dims[2] = {m, n};
  gpuc_set_shape(c->out[0], a->dt, 2, dims);
  return 0;
}

/* ---- Einsum ------------------------------------------------------------ */

/* One term of the equation: letters in order and where "..." sits. */
typedef struct {
  char lab[GPUC_MAX_RANK];
  int nlab;
  int ell;                       /* ellipsis before letter ell; -1: none */
} Term;

static bool is_letter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

static int parse_term(OpCtx *c, const char *s, size_t len, Term *t, const char *what) {
  t->nlab = 0;
  t->ell = -1;
  for (size_t i = 0; i < len; i++) {
    char ch = s[i];
    if (is_letter(ch)) {
      if (t->nlab == GPUC_MAX_RANK)
        return gpuc_op_fail(c, "equation: %s has more than %d labels", what, GPUC_MAX_RANK);
      t->lab[t->nlab++] = ch;
    } else if (ch == '.') {
      if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        return gpuc_op_fail(c, "equation: %s has a '.' that is not part of '...'", what);
      if (t->ell >= 0) return gpuc_op_fail(c, "equation: %s has more than one '...'", what);
      t->ell = t->nlab;
      i += 2;
    } else if (ch > ' ' && ch < 127) {
      return gpuc_op_fail(c, "equation: unexpected character '%c' in %s", ch, what);
    } else {
      return gpuc_op_fail(c, "equation: unexpected byte 0x%02x in %s", (unsigned char)ch, what);
    }
  }
  return 0;
}

void gpuc_einsum_free(GpucEinsum *es) {
  free(es->in_lab);
  es->in_lab = NULL;
}

/* Label of letter ch: after the ellipsis labels, letters in ASCII order. */
static int letter_id(const GpucEinsum *es, const bool *used, char ch) {
  int id = es->nell;
  for (int k = 0; k < (unsigned char)ch; k++) id += used[k];
  return id;
}

/* Split "lhs[->rhs]" (spaces removed) into terms; checks the characters
 * and the term count. */
static int split_equation(OpCtx *c, const char *eq, char **buf_out, Term **terms_out,
                          Term *out, bool *explicit_out) {
  size_t len = strlen(eq);
  char *buf = malloc(len + 1);
  Term *terms = calloc((size_t)c->nin + 1, sizeof *terms);
  *buf_out = buf;
  *terms_out = terms;
  if (!buf || !terms) return gpuc_op_fail(c, "out of host memory");
  size_t n = 0;
  for (size_t i = 0; i < len; i++)
    if (eq[i] != ' ') buf[n++] = eq[i];
  buf[n] = 0;
  char *arrow = strstr(buf, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - buf) : n;
  for (size_t i = 0; i < n; i++) {
    bool in_arrow = arrow && (buf + i == arrow || buf + i == arrow + 1);
    if ((buf[i] == '-' || buf[i] == '>') && !in_arrow)
      return gpuc_op_fail(c, "equation '%s': stray '%c' (only one '->' is allowed)", eq, buf[i]);
    if (buf[i] == ',' && i > lhs_len)
      return gpuc_op_fail(c, "equation '%s': the output cannot have ','", eq);
  }
  int nterm = 1;
  for (size_t i = 0; i < lhs_len; i++) nterm += buf[i] == ',';
  if (nterm != c->nin)
    return gpuc_op_fail(c, "equation '%s' has %d input terms but the node has %d inputs", eq,
                        nterm, c->nin);
  size_t start = 0;
  for (int k = 0; k < nterm; k++) {
    size_t end = start;
    while (end < lhs_len && buf[end] != ',') end++;
    char what[32];
    snprintf(what, sizeof what, "input term %d", k);
    if (parse_term(c, buf + start, end - start, &terms[k], what)) return -1;
    start = end + 1;
  }
  *explicit_out = arrow != NULL;
  if (arrow && parse_term(c, arrow + 2, strlen(arrow + 2), out, "the output")) return -1;
  return 0;
}

/* Check input k against its term; number its axes' labels; merge sizes. */
static int bind_input(OpCtx *c, GpucEinsum *es, const Term *t, int k, const bool *used) {
  const Tensor *x = c->in[k];
  int ne = x->rank - t->nlab; /* dims covered by the ellipsis */
  if (ne < 0 || (t->ell < 0 && ne != 0))
    return gpuc_op_fail(c, "equation: input %d has rank %d but its term has %d labels%s", k,
                        x->rank, t->nlab, t->ell >= 0 ? " and '...'" : "");
  int a = 0;
  for (int i = 0; i <= t->nlab; i++) {
    if (i == t->ell)
      for (int j = 0; j < ne; j++) es->in_lab[k][a++] = es->nell - ne + j;
    if (i < t->nlab) es->in_lab[k][a++] = letter_id(es, used, t->lab[i]);
  }
  for (a = 0; a < x->rank; a++) {
    int l = es->in_lab[k][a];
    int64_t d = x->dims[a];
    for (int b = 0; b < a; b++) /* a repeated label takes a diagonal: sizes must agree */
      if (es->in_lab[k][b] == l && d >= 0 && x->dims[b] >= 0 && d != x->dims[b])
        return gpuc_op_fail(c, "equation: input %d repeats a label on axes %d and %d, whose sizes "
                            "differ (%lld vs %lld)", k, b, a, (long long)x->dims[b], (long long)d);
    if (es->dim[l] == -2) es->dim[l] = d;
    else if (merge_dim(es->dim[l], d, &es->dim[l]))
      return gpuc_op_fail(c, "equation: input %d axis %d has size %lld, which does not match "
                          "size %lld of the same label elsewhere", k, a, (long long)d,
                          (long long)es->dim[l]);
  }
  return 0;
}

/* Output labels: explicit (checked) or implicit (the ellipsis dims, then the
 * letters used exactly once, in ASCII order). */
static int bind_output(OpCtx *c, GpucEinsum *es, const Term *terms, const Term *out,
                       bool explicit, const bool *used) {
  if (!explicit) {
    int count[128] = {0};
    for (int k = 0; k < c->nin; k++)
      for (int i = 0; i < terms[k].nlab; i++) count[(unsigned char)terms[k].lab[i]]++;
    int r = 0;
    for (int j = 0; j < es->nell; j++) es->out_lab[r++] = j;
    for (int ch = 0; ch < 128; ch++) {
      if (count[ch] != 1) continue;
      if (r == GPUC_MAX_RANK)
        return gpuc_op_fail(c, "equation: output would have rank over %d", GPUC_MAX_RANK);
      es->out_lab[r++] = letter_id(es, used, (char)ch);
    }
    es->out_rank = r;
    return 0;
  }
  if (out->ell < 0 && es->nell > 0)
    return gpuc_op_fail(c, "equation: the inputs' '...' covers %d dims but the output has no "
                        "'...'", es->nell);
  bool seen[128] = {false};
  int r = 0;
  for (int i = 0; i <= out->nlab; i++) {
    if (i == out->ell)
      for (int j = 0; j < es->nell; j++) {
        if (r == GPUC_MAX_RANK)
          return gpuc_op_fail(c, "equation: output has rank over %d", GPUC_MAX_RANK);
        es->out_lab[r++] = j;
      }
    if (i == out->nlab) break;
    unsigned char ch = (unsigned char)out->lab[i];
    if (!used[ch]) return gpuc_op_fail(c, "equation: output label '%c' is in no input", ch);
    if (seen[ch]) return gpuc_op_fail(c, "equation: output label '%c' is repeated", ch);
    seen[ch] = true;
    if (r == GPUC_MAX_RANK) return gpuc_op_fail(c, "equation: output has rank over %d", GPUC_MAX_RANK);
    es->out_lab[r++] = letter_id(es, used, (char)ch);
  }
  es->out_rank = r;
  return 0;
}

int gpuc_einsum_parse(OpCtx *c, GpucEinsum *es) {
  memset(es, 0, sizeof *es);
  es->nin = c->nin;
  const char *eq = gpuc_attr_s(c->n, "equation", NULL);
  if (!eq) return gpuc_op_fail(c, "attribute equation is missing");
  for (int k = 0; k < c->nin; k++)
    if (!c->in[k]) return gpuc_op_fail(c, "input %d is missing", k);
  char *buf = NULL;
  Term *terms = NULL, out = {.ell = -1};
  bool explicit = false, used[128] = {false};
  int rc = -1;
  if (split_equation(c, eq, &buf, &terms, &out, &explicit)) goto done;
  es->in_lab = calloc((size_t)c->nin, sizeof *es->in_lab);
  if (!es->in_lab) { gpuc_op_fail(c, "out of host memory"); goto done; }
  int nletters = 0;
  for (int k = 0; k < c->nin; k++) {
    int ne = c->in[k]->rank - terms[k].nlab;
    if (terms[k].ell >= 0 && ne > es->nell) es->nell = ne;
    for (int i = 0; i < terms[k].nlab; i++) {
      unsigned char ch = (unsigned char)terms[k].lab[i];
      nletters += !used[ch];
      used[ch] = true;
    }
  }
  es->nlab = es->nell + nletters;
  for (int l = 0; l < GPUC_EINSUM_MAX_LABELS; l++) es->dim[l] = -2; /* not seen yet */
  for (int k = 0; k < c->nin; k++)
    if (bind_input(c, es, &terms[k], k, used)) goto done;
  if (bind_output(c, es, terms, &out, explicit, used)) goto done;
  rc = 0;
done:
  free(buf);
  free(terms);
  if (rc) gpuc_einsum_free(es);
  return rc;
}

int infer_Einsum(OpCtx *c) {
  for (int k = 0; k < c->nin; k++) {
    if (!c->in[k]) continue;
    GpucDType dt = c->in[k]->dt;
    if (dt == GPUC_DT_UNDEF || dt == GPUC_DT_BOOL)
      return gpuc_op_unsupported(c, "input dtype %s is not supported", gpuc_dtype_name(dt));
    if (dt != c->in[0]->dt)
      return gpuc_op_fail(c, "input %d is %s but input 0 is %s", k, gpuc_dtype_name(dt),
                          gpuc_dtype_name(c->in[0]->dt));
  }
  GpucEinsum es;
  if (gpuc_einsum_parse(c, &es)) return -1;
  Tensor *y = c->out[0];
  y->dt = c->in[0]->dt;
  y->rank = es.out_rank;
  for (int d = 0; d < es.out_rank; d++) y->dims[d] = es.dim[es.out_lab[d]];
  gpuc_einsum_free(&es);
  return 0;
}

/* Det-11: X [..., M, M] float -> [...] */
int infer_Det(OpCtx *c) {
  static const GpucDType floats[] = {GPUC_DT_F32, GPUC_DT_F16, GPUC_DT_BF16, GPUC_DT_F64, GPUC_DT_UNDEF};
  const Tensor *x = c->in[0];
  if (gpuc_check_dtype(c, 0, floats)) return -1;
  int r = x->rank;
  if (r < 2) return gpuc_op_fail(c, "input must be [..., M, M], got rank %d", r);
  int64_t m = x->dims[r - 1], m2 = x->dims[r - 2];
  if (m >= 0 && m2 >= 0 && m != m2) return gpuc_op_fail(c, "matrices must be square, got %lld x %lld", (long long)m2, (long long)m);
  gpuc_set_shape(c->out[0], x->dt, r - 2, x->dims);
  return 0;
}
