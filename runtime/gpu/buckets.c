/* A bucket plan on the GPU: one session per bucket, all sharing the
 * container session's stream, arena (the largest bucket's), weights (one
 * copy) and workspace (the largest need). Inputs are staged on the host at
 * their actual shape; a run picks the smallest bucket that holds them,
 * pads them into it (runtime/buckets.c), uploads and replays that bucket's
 * CUDA graph; outputs are sliced back to the actual shape. */
#include "session_internal.h"
#include "buckets.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct BucketRun {
  GpucSession **sess;            /* [nbuckets]; the last is the container session itself */
  uint32_t nin;
  const char **in_names;         /* the plan's inputs, in tensor order */
  Tensor **staged;               /* [nin]: as set, NULL until set */
  int active;                    /* the bucket the last prepare chose, -1 before */
  int64_t actual[GPUC_PLAN_MAX_AXES];
} BucketRun;

int gpuc_buckets_open(GpucSession *s, GpucErr *e) {
  const Plan *p = s->plan;
  BucketRun *b = calloc(1, sizeof *b);
  if (!b) return gpuc_err_set(e, "out of memory");
  s->bk = b;
  b->active = -1;
  b->sess = calloc(p->nbuckets, sizeof *b->sess);
  b->in_names = calloc(p->ntensors + 1, sizeof *b->in_names);
  b->staged = calloc(p->ntensors + 1, sizeof *b->staged);
  if (!b->sess || !b->in_names || !b->staged) return gpuc_err_set(e, "out of memory");
  for (uint32_t i = 0; i < p->ntensors; i++)
    if (p->tensors[i].role == PLAN_ROLE_INPUT || p->tensors[i].role == PLAN_ROLE_INPUT_OUTPUT)
      b->in_names[b->nin++] = gpuc_plan_str(p, p->tensors[i].name);
  size_t ws = s->workspace_bytes;
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    const Plan *bp = gpuc_plan_bucket(p, i);
    if (bp == p) { b->sess[i] = s; continue; }
    char what[64];
    snprintf(what, sizeof what, "bucket %u", i);
    if (!(b->sess[i] = gpuc_session_open_bucket(s, (Plan *)bp, what, e))) {
      gpuc_err_prefix(e, what);
      return -1;
    }
    if (b->sess[i]->workspace_bytes > ws) ws = b->sess[i]->workspace_bytes;
  }
  if (ws > s->workspace_bytes) { /* one workspace, the largest any bucket's algorithms need */
    CU_TRY(e, cu.cuCtxSetCurrent(s->ctx));
    cu.cuMemFree(s->workspace);
    s->workspace = 0;
    if (gpuc_session_inject("cuMemAlloc (the buckets' workspace)", e)) return -1;
    CU_TRY(e, cu.cuMemAlloc(&s->workspace, ws));
    s->workspace_bytes = ws;
  }
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    b->sess[i]->workspace = s->workspace;
    b->sess[i]->workspace_bytes = ws;
  }
  return 0;
}

void gpuc_buckets_close(GpucSession *s) {
  BucketRun *b = s->bk;
  if (!b) return;
  s->bk = NULL;
  if (b->sess)
    for (uint32_t i = 0; i < s->plan->nbuckets; i++)
      if (b->sess[i] != s) gpuc_session_free(b->sess[i]);
  for (uint32_t i = 0; i < b->nin; i++) gpuc_tensor_free(b->staged[i]);
  free(b->sess);
  free(b->in_names);
  free(b->staged);
  free(b);
}

int gpuc_buckets_set_input(GpucSession *s, const char *name, const Tensor *host, GpucErr *e) {
  BucketRun *b = s->bk;
  for (uint32_t i = 0; i < b->nin; i++) {
    if (strcmp(b->in_names[i], name)) continue;
    /* its dims alone against the ranges now, so the message names the call that was wrong */
    int64_t actual[GPUC_PLAN_MAX_AXES];
    GpucErr tmp = {0};
    const char *names[1] = {name};
    const Tensor *ins[1] = {host};
    if (gpuc_bucket_actual(s->plan, 1, names, ins, actual, &tmp) && !strstr(tmp.msg, "no input gives"))
      return gpuc_err_set(e, "%s", tmp.msg);
    Tensor *c = gpuc_tensor_clone(host, e);
    if (!c) return -1;
    gpuc_tensor_free(b->staged[i]);
    b->staged[i] = c;
    b->active = -1;
    return 0;
  }
  return gpuc_err_set(e, "the plan has no input named '%s'", name);
}

int gpuc_buckets_prepare(GpucSession *s, GpucSession **run, GpucErr *e) {
  BucketRun *b = s->bk;
  const Plan *p = s->plan;
  for (uint32_t i = 0; i < b->nin; i++)
    if (!b->staged[i]) return gpuc_err_set(e, "input '%s' was not set", b->in_names[i]);
  if (gpuc_bucket_actual(p, b->nin, b->in_names, (const Tensor *const *)b->staged, b->actual, e)) return -1;
  int k = gpuc_bucket_select(p, b->actual, e);
  if (k < 0) return -1;
  for (uint32_t i = 0; i < b->nin; i++) {
    Tensor *x = gpuc_bucket_pad(p, b->in_names[i], b->staged[i], p->buckets[k].size, e);
    if (!x) return -1;
    int rc = gpuc_session_upload(b->sess[k], b->in_names[i], x, e);
    gpuc_tensor_free(x);
    if (rc) return -1;
  }
  b->active = k;
  *run = b->sess[k];
  return 0;
}

Tensor *gpuc_buckets_get_output(GpucSession *s, const char *name, GpucErr *e) {
  BucketRun *b = s->bk;
  if (b->active < 0) { gpuc_err_set(e, "output '%s' asked before a run with the inputs as set", name); return NULL; }
  Tensor *y = gpuc_session_download(b->sess[b->active], name, e);
  if (!y) return NULL;
  Tensor *z = gpuc_bucket_slice(s->plan, name, y, b->actual, e);
  gpuc_tensor_free(y);
  return z;
}

GpucSession *gpuc_buckets_session(GpucSession *s, uint32_t k) {
  return s->bk && k < s->plan->nbuckets ? s->bk->sess[k] : NULL;
}

const Plan *gpuc_session_run_plan(const GpucSession *s) {
  if (!s->bk || s->bk->active < 0) return s->plan;
  return gpuc_plan_bucket(s->plan, (uint32_t)s->bk->active);
}
