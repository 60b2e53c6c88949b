/* One plan for a range of shapes: the buckets' plans with their weights
 * stored once (plan_buckets.h). */
#include "plan_buckets.h"
#include <stdlib.h>
#include <string.h>

typedef struct SharedWeight {
  uint64_t off, bytes;
  uint64_t key;                  /* FNV-1a of the first KEY_BYTES bytes: a prefilter */
} SharedWeight;

#define KEY_BYTES 64u
static uint64_t weight_key(const uint8_t *d, uint64_t n) {
  return gpuc_fnv1a64(d, (size_t)(n < KEY_BYTES ? n : KEY_BYTES), GPUC_FNV_INIT);
}

static uint64_t align256(uint64_t x) { return (x + GPUC_PLAN_ALIGN - 1) & ~(uint64_t)(GPUC_PLAN_ALIGN - 1); }

/* Where bytes d[0..n) are stored in w (appending them if new). A stored
 * weight whose leading n bytes are these serves too: a constant folded at
 * a bucket's shape (a broadcast row, [batch, seq, hidden]) is often the
 * leading part of the same constant at a larger bucket's, so the buckets
 * are added largest first. */
static int store(SharedWeights *w, const uint8_t *d, uint64_t n, uint64_t *off, GpucErr *e) {
  uint64_t key = weight_key(d, n);
  for (uint32_t i = 0; i < w->n; i++) {
    const SharedWeight *s = &w->ent[i];
    bool maybe = s->bytes >= n && (n < KEY_BYTES || s->key == key);
    if (maybe && !memcmp(w->data + s->off, d, (size_t)n)) {
      *off = s->off;
      w->deduped_bytes += n;
      return 0;
    }
  }
  uint64_t at = align256(w->size);
  if (at + n > w->cap) {
    uint64_t cap = w->cap ? w->cap : ((uint64_t)1 << 20);
    while (cap < at + n) cap *= 2;
    uint8_t *nd = realloc(w->data, (size_t)cap);
    if (!nd) return gpuc_err_set(e, "out of memory storing %llu weight bytes", (unsigned long long)cap);
    w->data = nd;
    w->cap = cap;
  }
  if (w->n == w->ncap) {
    uint32_t nc = w->ncap ? w->ncap * 2 : 256;
    SharedWeight *ne = realloc(w->ent, nc * sizeof *ne);
    if (!ne) return gpuc_err_set(e, "out of memory");
    w->ent = ne;
    w->ncap = nc;
  }
  memset(w->data + w->size, 0, (size_t)(at - w->size));
  memcpy(w->data + at, d, (size_t)n);
  w->size = at + n;
  w->ent[w->n++] = (SharedWeight){.off = at, .bytes = n, .key = key};
  *off = at;
  return 0;
}

int gpuc_shared_weights_add(SharedWeights *w, Plan *p, GpucErr *e) {
  for (uint32_t i = 0; i < p->ntensors; i++) {
    PlanTensor *t = &p->tensors[i];
    if (t->mem != PLAN_MEM_WEIGHTS) continue;
    uint64_t off = 0;
    w->added_bytes += t->bytes;
    if (t->bytes && store(w, p->weights + t->offset, t->bytes, &off, e)) return -1;
    t->offset = off;
  }
  if (!p->weights_borrowed) free(p->weights);
  p->weights = NULL;
  p->weights_size = 0;
  p->meta.weight_bytes = 0;
  return 0;
}

void gpuc_shared_weights_free(SharedWeights *w) {
  free(w->data);
  free(w->ent);
  memset(w, 0, sizeof *w);
}

/* Append s to p's string table; its offset. */
static int add_string(Plan *p, const char *s, uint32_t *off, GpucErr *e) {
  size_t n = strlen(s) + 1;
  char *ns = realloc(p->strings, p->strings_size + n);
  if (!ns) return gpuc_err_set(e, "out of memory");
  memcpy(ns + p->strings_size, s, n);
  p->strings = ns;
  *off = (uint32_t)p->strings_size;
  p->strings_size += n;
  return 0;
}

int gpuc_plan_buckets_build(SharedWeights *w, Plan **plans, uint32_t n, const BucketSpec *spec, Plan **out,
                            GpucErr *e) {
  *out = NULL;
  Plan *c = n ? plans[n - 1] : NULL;
  int rc = -1;
  if (n == 0 || n != spec->nbuckets || spec->naxes == 0 || spec->naxes > GPUC_PLAN_MAX_AXES ||
      n > GPUC_PLAN_MAX_BUCKETS) {
    gpuc_err_set(e, "internal: %u bucket plans for %u buckets over %u axes", n, spec->nbuckets, spec->naxes);
    goto fail;
  }
  /* the container owns the shared blob; the others borrow it */
  c->weights = w->data ? w->data : malloc(1);
  if (!c->weights) { gpuc_err_set(e, "out of memory"); goto fail; }
  c->weights_size = w->size;
  c->weights_borrowed = false;
  w->data = NULL;
  for (uint32_t i = 0; i < n; i++) {
    plans[i]->meta.weight_bytes = w->size;
    if (plans[i] == c) continue;
    plans[i]->weights = c->weights;
    plans[i]->weights_size = w->size;
    plans[i]->weights_borrowed = true;
  }
  /* a plan read back from its file holds empty tables of its own */
  free(c->axes); free(c->buckets); free(c->dimuse); free(c->bucket_plans);
  c->naxes = spec->naxes;
  c->nbuckets = n;
  c->ndimuse = spec->nuses;
  c->axes = calloc(spec->naxes, sizeof *c->axes);
  c->buckets = calloc(n, sizeof *c->buckets);
  c->dimuse = calloc(spec->nuses + 1, sizeof *c->dimuse);
  c->bucket_plans = calloc(n, sizeof *c->bucket_plans);
  if (!c->axes || !c->buckets || !c->dimuse || !c->bucket_plans) { gpuc_err_set(e, "out of memory"); goto fail; }
  for (uint32_t i = 0; i < n; i++) c->bucket_plans[i] = plans[i];
  plans = NULL; /* owned by c from here (the array stays the caller's) */
  for (uint32_t a = 0; a < spec->naxes; a++) {
    c->axes[a] = spec->axes[a];
    if (add_string(c, spec->axis_name[a], &c->axes[a].name, e)) goto fail;
  }
  for (uint32_t i = 0; i < n; i++) {
    memcpy(c->buckets[i].size, spec->sizes[i], sizeof c->buckets[i].size);
    c->buckets[i].bytes = c->bucket_plans[i] == c ? 0 : 1; /* the writer sets the image's place */
  }
  for (uint32_t k = 0; k < spec->nuses; k++) {
    c->dimuse[k] = spec->uses[k];
    if (add_string(c, spec->use_name[k], &c->dimuse[k].name, e)) goto fail;
  }
  *out = c;
  return 0;
fail:
  if (plans) {
    for (uint32_t i = 0; i < n; i++) {
      if (plans[i] != c) gpuc_plan_free(plans[i]);
    }
  }
  gpuc_plan_free(c);
  return rc;
}
