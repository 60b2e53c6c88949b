/* An Attention's mask split into a causal part and a padding row, by what
 * it computes (passes/causal_mask.c; called by attention_gqa_causal.c). */
#ifndef GPUC_CAUSAL_MASK_H
#define GPUC_CAUSAL_MASK_H
#include "ir.h"

/* per mask value already split: the mask that replaced it (-1: none) and
 * the fill; sized for every Attention node of the graph */
typedef struct CausalMemo {
  int n, cap;
  int *mask, *rest;
  double *fill;
} CausalMemo;

int gpuc_causal_memo_init(CausalMemo *m, int cap);
void gpuc_causal_memo_free(CausalMemo *m);
/* node i (an Attention with a mask, not yet causal): 1 when it became
 * causal = 1 (causal_fill, and the mask replaced by the padding row or
 * dropped), 0 when its mask is not one the rewrite is exact for, -1 on
 * error (e set) */
int gpuc_attention_causal_mask(Graph *g, int i, CausalMemo *memo, GpucErr *e);

#endif
