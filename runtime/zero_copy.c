/* Which bound device buffers a run uses in place (zero_copy.h says the
 * rules and why). */
#include "zero_copy.h"
#include <stdlib.h>
#include <string.h>

const char *gpuc_zc_why_text(GpucZcWhy why) {
  switch (why) {
  case GPUC_ZC_OK: return "used in place";
  case GPUC_ZC_WEIGHTS: return "a constant the compiler folded into the weights: copied";
  case GPUC_ZC_BAKED: return "a library descriptor made at load holds its address (GEMM bias/scale or 2:4 "
                             "operand): copied";
  case GPUC_ZC_VIEW_LARGER: return "a view of it is larger than the tensor: copied";
  case GPUC_ZC_WRITTEN_INPUT: return "an input a step of the plan writes: copied";
  case GPUC_ZC_WHY_COUNT_: break;
  }
  return "?";
}

void gpuc_zc_free(GpucZcPlan *zp) {
  if (!zp) return;
  free(zp->tensor);
  free(zp->bytes);
  free(zp->why);
  free(zp->group);
  free(zp->member_start);
  free(zp->members);
  free(zp->history);
  memset(zp, 0, sizeof *zp);
}

/* Tensors whose addresses session.c hands to a library at load, not per
 * capture: set in baked[] (by base tensor). */
static void mark_baked(const Plan *p, uint8_t *baked) {
  for (uint32_t i = 0; i < p->ngemms; i++) {
    const PlanGemm *g = &p->gemms[i];
    uint32_t t[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    if (g->c != UINT32_MAX && g->ldc == 0) t[0] = g->c;          /* the epilogue's bias row */
    if (g->flags & PLAN_GEMM_F_BIAS_C) t[1] = g->reserved;       /* the bias row beside C */
    if (g->compute == PLAN_GEMM_COMPUTE_F8) { t[2] = (uint32_t)g->stride_a; t[3] = (uint32_t)g->stride_b; }
    for (int k = 0; k < 4; k++)
      if (t[k] < p->ntensors) baked[gpuc_plan_base_tensor(p, t[k])] = 1;
    if (g->flags & PLAN_GEMM_F_SPARSE24) { /* cuSPARSELt's plan holds A, C and Y */
      uint32_t s[4] = {g->a, g->b, g->c, g->y};
      for (int k = 0; k < 4; k++)
        if (s[k] < p->ntensors) baked[gpuc_plan_base_tensor(p, s[k])] = 1;
    }
  }
}

/* Tensors a library step writes (by base): GEMM Y, a convolution's result. */
static void mark_written(const Plan *p, uint8_t *written) {
  for (uint32_t i = 0; i < p->ngemms; i++) written[gpuc_plan_base_tensor(p, p->gemms[i].y)] = 1;
  for (uint32_t i = 0; i < p->nconvs; i++) {
    const PlanConv *c = &p->convs[i];
    uint32_t t = c->mode == PLAN_CONV_BWD_DATA ? c->x : c->mode == PLAN_CONV_BWD_FILTER ? c->w : c->y;
    written[gpuc_plan_base_tensor(p, t)] = 1;
  }
}

int gpuc_zc_analyze(const Plan *p, const uint32_t *ins, uint32_t nin, const uint32_t *outs, uint32_t nout,
                    GpucZcPlan *zp, GpucErr *e) {
  memset(zp, 0, sizeof *zp);
  uint32_t n = nin + nout, nt = p->ntensors;
  zp->nio = n;
  zp->nin = nin;
  zp->tensor = calloc(n + 1, sizeof *zp->tensor);
  zp->bytes = calloc(n + 1, sizeof *zp->bytes);
  zp->why = calloc(n + 1, 1);
  zp->group = calloc(n + 1, sizeof *zp->group);
  zp->member_start = calloc(n + 2, sizeof *zp->member_start);
  zp->members = calloc(nt + 1, sizeof *zp->members);
  zp->history = calloc(n + 1, sizeof *zp->history);
  uint8_t *baked = calloc(nt + 1, 1), *written = calloc(nt + 1, 1);
  uint32_t *base_group = malloc((nt + 1) * sizeof *base_group); /* group of a base tensor, or UINT32_MAX */
  if (!zp->tensor || !zp->bytes || !zp->why || !zp->group || !zp->member_start || !zp->members || !zp->history ||
      !baked || !written || !base_group) {
    free(baked); free(written); free(base_group);
    gpuc_zc_free(zp);
    return gpuc_err_set(e, "out of memory");
  }
  mark_baked(p, baked);
  mark_written(p, written);
  for (uint32_t t = 0; t < nt; t++) base_group[t] = UINT32_MAX;
  uint32_t *bases = calloc(n + 1, sizeof *bases);
  if (!bases) {
    free(baked); free(written); free(base_group);
    gpuc_zc_free(zp);
    return gpuc_err_set(e, "out of memory");
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t t = i < nin ? ins[i] : outs[i - nin];
    uint32_t b = gpuc_plan_base_tensor(p, t);
    zp->tensor[i] = t;
    zp->bytes[i] = p->tensors[t].bytes;
    if (base_group[b] == UINT32_MAX) { bases[zp->ngroups] = b; base_group[b] = zp->ngroups++; }
    zp->group[i] = base_group[b];
  }
  /* members: per group its base and every tensor whose chain ends there */
  uint32_t *count = calloc(zp->ngroups + 1, sizeof *count);
  if (!count) {
    free(baked); free(written); free(base_group); free(bases);
    gpuc_zc_free(zp);
    return gpuc_err_set(e, "out of memory");
  }
  for (uint32_t t = 0; t < nt; t++) {
    uint32_t g = base_group[gpuc_plan_base_tensor(p, t)];
    if (g != UINT32_MAX) count[g]++;
  }
  for (uint32_t g = 0; g < zp->ngroups; g++) zp->member_start[g + 1] = zp->member_start[g] + count[g];
  memset(count, 0, (zp->ngroups + 1) * sizeof *count);
  for (uint32_t t = 0; t < nt; t++) {
    uint32_t g = base_group[gpuc_plan_base_tensor(p, t)];
    if (g != UINT32_MAX) zp->members[zp->member_start[g] + count[g]++] = t;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t g = zp->group[i], b = bases[g];
    GpucZcWhy why = GPUC_ZC_OK;
    if (p->tensors[b].mem != PLAN_MEM_ARENA) why = GPUC_ZC_WEIGHTS;
    for (uint32_t k = zp->member_start[g]; why == GPUC_ZC_OK && k < zp->member_start[g + 1]; k++) {
      uint32_t m = zp->members[k];
      if (baked[m]) why = GPUC_ZC_BAKED;
      else if (p->tensors[m].bytes > zp->bytes[i]) why = GPUC_ZC_VIEW_LARGER;
    }
    if (why == GPUC_ZC_OK && i < nin && written[b]) why = GPUC_ZC_WRITTEN_INPUT;
    zp->why[i] = (uint8_t)why;
  }
  free(baked); free(written); free(base_group); free(bases); free(count);
  return 0;
}

static bool overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) { return a < b + bn && b < a + an; }

static bool seen(const uint64_t *h, uint64_t ptr) {
  for (int k = 0; k < GPUC_ZC_HISTORY; k++)
    if (h[k] == ptr) return true;
  return false;
}

uint32_t gpuc_zc_choose(GpucZcPlan *zp, const uint64_t *ptr, const GpucZcRange *own, uint32_t nown, uint64_t *key,
                        uint8_t *in_place) {
  uint32_t chosen = 0;
  for (uint32_t g = 0; g < zp->ngroups; g++) key[g] = 0;
  for (uint32_t i = 0; i < zp->nio; i++) {
    in_place[i] = 0;
    uint64_t a = ptr[i], n = zp->bytes[i];
    uint32_t g = zp->group[i];
    if (!a || zp->why[i] != GPUC_ZC_OK || key[g] || a % GPUC_ZC_ALIGN) continue;
    const uint64_t *h = zp->history[i];
    if (h[0] && !seen(h, a)) continue; /* a new address: copied this time */
    bool ok = true;
    for (uint32_t r = 0; ok && r < nown; r++) ok = !overlap(a, n ? n : 1, own[r].lo, own[r].hi - own[r].lo);
    for (uint32_t j = 0; ok && j < i; j++)
      if (in_place[j] && (i >= zp->nin || j >= zp->nin))
        ok = !overlap(a, n ? n : 1, ptr[j], zp->bytes[j] ? zp->bytes[j] : 1);
    if (!ok) continue;
    key[g] = a;
    in_place[i] = 1;
    chosen++;
  }
  for (uint32_t i = 0; i < zp->nio; i++) { /* most recent first, each address once */
    uint64_t a = ptr[i], *h = zp->history[i];
    if (!a || h[0] == a) continue;
    int k = 0;
    while (k < GPUC_ZC_HISTORY - 1 && h[k] != a) k++;
    memmove(&h[1], &h[0], (size_t)k * sizeof *h);
    h[0] = a;
  }
  return chosen;
}
