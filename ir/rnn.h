/* The recurrent ops LSTM, GRU and RNN (ONNX opsets 7 and 14), described
 * once for shape inference (ir/infer_rnn.c), the reference
 * (runtime/ref/ref_rnn.c) and the GPU lowering (codegen/lower_rnn.c).
 *
 * Inputs: X [S, B, I] (layout 1: [B, S, I]), W [D, G*H, I], R [D, G*H, H],
 * B? [D, 2*G*H] (Wb then Rb), sequence_lens? int32 [B], initial_h?
 * [D, B, H] (layout 1: [B, D, H]); LSTM also initial_c? (as initial_h) and
 * P? [D, 3*H] (peepholes i, o, f). G = 4 gates for LSTM (i, o, f, c), 3
 * for GRU (z, r, h), 1 for RNN; D = 2 for direction "bidirectional", else 1.
 * Outputs (all optional): Y [S, D, B, H] (layout 1: [B, S, D, H]), Y_h and
 * (LSTM) Y_c [D, B, H] (layout 1: [B, D, H]). */
#ifndef GPUC_RNN_H
#define GPUC_RNN_H
#include "ir.h"

enum { RNN_IN_X, RNN_IN_W, RNN_IN_R, RNN_IN_B, RNN_IN_SEQLENS, RNN_IN_H0, RNN_IN_C0, RNN_IN_P };
enum { RNN_OUT_Y, RNN_OUT_YH, RNN_OUT_YC };

/* The activation functions ONNX lists for the recurrent ops. */
typedef enum RnnActKind {
  RNN_ACT_RELU, RNN_ACT_TANH, RNN_ACT_SIGMOID, RNN_ACT_AFFINE, RNN_ACT_LEAKYRELU,
  RNN_ACT_THRESHOLDEDRELU, RNN_ACT_SCALEDTANH, RNN_ACT_HARDSIGMOID, RNN_ACT_ELU,
  RNN_ACT_SOFTSIGN, RNN_ACT_SOFTPLUS
} RnnActKind;

typedef struct RnnAct {
  RnnActKind kind;
  float alpha, beta;            /* for the kinds that take them, defaults filled in */
} RnnAct;

typedef struct RnnSpec {
  GpucOp op;                    /* GPUC_OP_LSTM, _GRU or _RNN */
  int gates;                    /* G: 4, 3, 1 */
  int nact;                     /* activations per direction: 3 (f g h), 2 (f g), 1 (f) */
  int dirs;                     /* D */
  bool reverse;                 /* direction "reverse" (D = 1) */
  int layout;                   /* 0: sequence first, 1: batch first */
  int64_t seq, batch, input, hidden; /* S, B, I, H; -1 unknown (import) */
  bool has_clip;
  float clip;                   /* gate pre-activations clipped to [-clip, clip] */
  bool input_forget;            /* LSTM: f = 1 - i */
  bool linear_before_reset;     /* GRU: r * (H R_h^T + Rb_h) instead of (r * H) R_h^T */
  RnnAct act[2][3];             /* per direction: f, g, h */
} RnnSpec;

/* The attributes and every known shape of node c->n checked into *s
 * (errors name the node; unknown activations and attributes are
 * unsupported, not errors). */
int gpuc_rnn_spec(OpCtx *c, RnnSpec *s);
/* Activation a of x, in double (the reference). */
double gpuc_rnn_act(const RnnAct *a, double x);
#endif
