/* Plan files: atomic writes; reads that validate every byte they use. */
#include "plan.h"
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(PlanHeader) == 64, "plan header layout");
_Static_assert(sizeof(PlanSection) == 24, "plan section layout");
_Static_assert(sizeof(PlanTensor) == 8 + 8 * GPUC_MAX_RANK + 16, "plan tensor layout");
_Static_assert(sizeof(PlanStep) == 4 * 12, "plan step layout");
_Static_assert(sizeof(PlanCost) == 16, "plan cost layout");
_Static_assert(sizeof(PlanTune) == 24, "plan tune layout");
_Static_assert(sizeof(PlanConv) == 88 && offsetof(PlanConv, mode) == 76, "plan conv layout");

uint32_t gpuc_plan_items_grid(uint64_t items, uint32_t block) {
  uint64_t blocks = block ? (items + block - 1) / block : 0;
  if (blocks == 0) blocks = 1;
  return blocks > GPUC_ITEMS_MAX_BLOCKS ? GPUC_ITEMS_MAX_BLOCKS : (uint32_t)blocks;
}

uint32_t gpuc_plan_base_tensor(const Plan *p, uint32_t t) {
  while (p->tensors[t].mem == PLAN_MEM_ALIAS) t = (uint32_t)p->tensors[t].offset;
  return t;
}

uint64_t gpuc_fnv1a64(const void *data, size_t n, uint64_t h) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
  return h;
}

typedef struct { uint32_t id; const void *data; uint64_t size; } SecOut;

static uint64_t align_up(uint64_t x) { return (x + GPUC_PLAN_ALIGN - 1) & ~(uint64_t)(GPUC_PLAN_ALIGN - 1); }

/* The file image of plan p (the bucket images inside it included);
 * `bucket_of` set: p is a bucket's plan inside that container, written with
 * GPUC_PLAN_F_BUCKET and without weights. */
static int plan_image(const Plan *p, const Plan *bucket_of, uint8_t **out, uint64_t *out_size, const char *path,
                      GpucErr *e) {
  if (p->ncosts != p->nsteps)
    return gpuc_err_set(e, "%s: internal: %u step costs for %u steps", path, p->ncosts, p->nsteps);
  if (p->ntune != p->nsteps)
    return gpuc_err_set(e, "%s: internal: %u step tune records for %u steps", path, p->ntune, p->nsteps);
  /* the buckets' images, each 256-aligned in BUCKET_PLANS */
  uint8_t *blob = NULL;
  uint64_t blob_size = 0;
  PlanBucket *bt = NULL;
  if (p->nbuckets) {
    bt = calloc(p->nbuckets, sizeof *bt);
    if (!bt) return gpuc_err_set(e, "%s: out of memory writing plan", path);
    for (uint32_t i = 0; i < p->nbuckets; i++) {
      bt[i] = p->buckets[i];
      bt[i].offset = bt[i].bytes = 0;
      const Plan *b = p->bucket_plans ? p->bucket_plans[i] : NULL;
      if (!b || b == p) continue;
      uint8_t *img;
      uint64_t n;
      if (plan_image(b, p, &img, &n, path, e)) { free(bt); free(blob); return -1; }
      uint64_t at = align_up(blob_size);
      uint8_t *nb = realloc(blob, at + n);
      if (!nb) { free(img); free(bt); free(blob); return gpuc_err_set(e, "%s: out of memory writing plan", path); }
      blob = nb;
      memset(blob + blob_size, 0, at - blob_size);
      memcpy(blob + at, img, n);
      free(img);
      bt[i].offset = at;
      bt[i].bytes = n;
      blob_size = at + n;
    }
  }
  PlanMeta meta = p->meta;
  if (bucket_of) meta.weight_bytes = bucket_of->weights_size; /* the container's */
  SecOut secs[] = {
    {PLAN_SEC_META, &meta, sizeof meta},
    {PLAN_SEC_STRINGS, p->strings, p->strings_size},
    {PLAN_SEC_TENSORS, p->tensors, (uint64_t)p->ntensors * sizeof(PlanTensor)},
    {PLAN_SEC_KERNELS, p->kernels, (uint64_t)p->nkernels * sizeof(PlanKernel)},
    {PLAN_SEC_STEPS, p->steps, (uint64_t)p->nsteps * sizeof(PlanStep)},
    {PLAN_SEC_ARGS, p->args, (uint64_t)p->nargs * sizeof(uint32_t)},
    {PLAN_SEC_GEMMS, p->gemms, (uint64_t)p->ngemms * sizeof(PlanGemm)},
    {PLAN_SEC_CONVS, p->convs, (uint64_t)p->nconvs * sizeof(PlanConv)},
    {PLAN_SEC_WEIGHTS, p->weights, bucket_of ? 0 : p->weights_size},
    {PLAN_SEC_PTX, p->ptx, p->ptx_size},
    {PLAN_SEC_CUBIN, p->cubin, p->cubin_size},
    {PLAN_SEC_COSTS, p->costs, (uint64_t)p->ncosts * sizeof(PlanCost)},
    {PLAN_SEC_TUNE, p->tune, (uint64_t)p->ntune * sizeof(PlanTune)},
    {PLAN_SEC_AXES, p->axes, (uint64_t)p->naxes * sizeof(PlanAxis)},
    {PLAN_SEC_BUCKETS, bt, (uint64_t)p->nbuckets * sizeof(PlanBucket)},
    {PLAN_SEC_DIMUSE, p->dimuse, (uint64_t)p->ndimuse * sizeof(PlanDimUse)},
    {PLAN_SEC_BUCKET_PLANS, blob, blob_size},
    {PLAN_SEC_TMAPS, p->tmaps, (uint64_t)p->ntmaps * sizeof(PlanTensorMap)},
  };
  uint32_t ns = sizeof secs / sizeof *secs;
  PlanHeader h = p->hdr;
  memcpy(h.magic, GPUC_PLAN_MAGIC, 8);
  h.format_version = GPUC_PLAN_FORMAT_VERSION;
  h.header_size = sizeof h;
  memset(h.gpuc_version, 0, sizeof h.gpuc_version);
  snprintf(h.gpuc_version, sizeof h.gpuc_version, "%s", GPUC_VERSION);
  h.nsections = ns;
  h.flags = bucket_of ? (h.flags | GPUC_PLAN_F_BUCKET) : (h.flags & ~(uint32_t)GPUC_PLAN_F_BUCKET);
  PlanSection table[PLAN_SEC_COUNT_];
  uint64_t off = align_up(sizeof h + ns * sizeof(PlanSection));
  for (uint32_t i = 0; i < ns; i++) {
    table[i] = (PlanSection){.id = secs[i].id, .offset = off, .size = secs[i].size};
    off = align_up(off + secs[i].size);
  }
  h.file_size = off;
  h.checksum = 0;
  uint8_t *buf = calloc(1, off);
  if (!buf) {
    free(bt); free(blob);
    return gpuc_err_set(e, "%s: out of memory writing plan (%llu bytes)", path, (unsigned long long)off);
  }
  memcpy(buf, &h, sizeof h);
  memcpy(buf + sizeof h, table, ns * sizeof(PlanSection));
  for (uint32_t i = 0; i < ns; i++)
    if (secs[i].size) memcpy(buf + table[i].offset, secs[i].data, secs[i].size);
  free(bt);
  free(blob);
  h.checksum = gpuc_fnv1a64(buf, off, GPUC_FNV_INIT);
  memcpy(buf, &h, sizeof h);
  *out = buf;
  *out_size = off;
  return 0;
}

int gpuc_plan_write(const Plan *p, const char *path, GpucErr *e) {
  uint8_t *buf;
  uint64_t off;
  if (plan_image(p, NULL, &buf, &off, path, e)) return -1;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) { free(buf); return gpuc_err_set(e, "%s: cannot write: %s", path, strerror(errno)); }
  bool ok = fwrite(buf, 1, off, f) == off;
  ok = (fclose(f) == 0) && ok;
  free(buf);
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    return gpuc_err_set(e, "%s: write failed", path);
  }
  return 0;
}

void gpuc_plan_free(Plan *p) {
  if (!p) return;
  if (p->bucket_plans)
    for (uint32_t i = 0; i < p->nbuckets; i++)
      if (p->bucket_plans[i] != p) gpuc_plan_free(p->bucket_plans[i]);
  free(p->bucket_plans); free(p->axes); free(p->buckets); free(p->dimuse);
  free(p->strings); free(p->tensors); free(p->kernels); free(p->steps); free(p->args);
  free(p->gemms); free(p->convs); free(p->ptx); free(p->cubin);
  if (!p->weights_borrowed) free(p->weights);
  free(p->costs); free(p->tune); free(p->tmaps);
  free(p);
}

const Plan *gpuc_plan_bucket(const Plan *p, uint32_t i) {
  return p->nbuckets && i < p->nbuckets && p->bucket_plans && p->bucket_plans[i] ? p->bucket_plans[i] : p;
}

const char *gpuc_plan_str(const Plan *p, uint32_t off) {
  return off < p->strings_size ? p->strings + off : "";
}

#define BAD(...) do { gpuc_err_set(e, __VA_ARGS__); goto fail; } while (0)
#define REBUILD "rebuild it with this gpuc: gpuc MODEL.onnx -o PLAN"

/* Copy section `id` (exactly `elem`-sized records) out of the file image. */
static int take(const uint8_t *buf, const PlanSection *tab, uint32_t ns, uint32_t id, size_t elem,
                void **out, uint64_t *count, const char *path, GpucErr *e) {
  for (uint32_t i = 0; i < ns; i++) {
    if (tab[i].id != id) continue;
    if (elem && tab[i].size % elem)
      return gpuc_err_set(e, "%s: corrupt plan: section %u has %llu bytes, not a multiple of %zu",
                          path, id, (unsigned long long)tab[i].size, elem);
    *out = malloc(tab[i].size ? tab[i].size : 1);
    if (!*out) return gpuc_err_set(e, "%s: out of memory", path);
    memcpy(*out, buf + tab[i].offset, tab[i].size);
    *count = elem ? tab[i].size / elem : tab[i].size;
    return 0;
  }
  return gpuc_err_set(e, "%s: corrupt plan: section %u missing", path, id);
}

static int check_tensor(const Plan *p, uint32_t i, const char *path, GpucErr *e) {
  const PlanTensor *t = &p->tensors[i];
  if (t->name >= p->strings_size) return gpuc_err_set(e, "%s: corrupt plan: tensor %u name", path, i);
  if (t->dt == GPUC_DT_UNDEF || t->dt >= GPUC_DT_COUNT || t->rank > GPUC_MAX_RANK)
    return gpuc_err_set(e, "%s: corrupt plan: tensor %u dtype/rank", path, i);
  Tensor d = {.dt = t->dt, .rank = t->rank};
  memcpy(d.dims, t->dims, sizeof d.dims);
  int64_t n = gpuc_numel(&d);
  if (n < 0 || (uint64_t)n > UINT64_MAX / 8 || t->bytes != (uint64_t)n * gpuc_dtype_size(t->dt))
    return gpuc_err_set(e, "%s: corrupt plan: tensor %u size", path, i);
  uint64_t limit = t->mem == PLAN_MEM_ARENA ? p->meta.arena_bytes
                 : t->mem == PLAN_MEM_WEIGHTS ? p->weights_size : 0;
  if (t->mem == PLAN_MEM_ALIAS) {
    if (t->offset >= i || p->tensors[t->offset].bytes != t->bytes ||
        p->tensors[t->offset].mem == PLAN_MEM_ALIAS)
      return gpuc_err_set(e, "%s: corrupt plan: tensor %u alias", path, i);
  } else if (t->mem > PLAN_MEM_WEIGHTS || t->offset > limit || t->bytes > limit - t->offset) {
    return gpuc_err_set(e, "%s: corrupt plan: tensor %u lies outside its memory", path, i);
  }
  if (t->role > PLAN_ROLE_INPUT_OUTPUT) return gpuc_err_set(e, "%s: corrupt plan: tensor %u role", path, i);
  return 0;
}

/* Step i's tune record against the step (the step itself checked). */
static int check_tune(const Plan *p, uint32_t i, const char *path, GpucErr *e) {
  const PlanStep *s = &p->steps[i];
  const PlanTune *t = &p->tune[i];
  if ((t->flags & ~PLAN_TUNE_F_KNOWN) || t->choice != 0)
    return gpuc_err_set(e, "%s: corrupt plan: step %u tune flags %#x choice %u", path, i, t->flags, t->choice);
  if (s->kind != PLAN_STEP_KERNEL && (t->flags || t->items || t->src_hash))
    return gpuc_err_set(e, "%s: corrupt plan: step %u is a library call with a tune record", path, i);
  if (!(t->flags & PLAN_TUNE_F_BLOCK_FREE)) {
    if ((t->flags & ~PLAN_TUNE_F_TENSOR_MATH) || t->items)
      return gpuc_err_set(e, "%s: corrupt plan: step %u tune flags %#x items %llu", path, i, t->flags,
                          (unsigned long long)t->items);
    return 0;
  }
  /* a free block size: a 1-D launch of 32..1024 threads a block (whole
   * warps), no shared memory, the grid the one the items need */
  if (t->items == 0 || t->items > ((uint64_t)1 << 48) || s->block[0] < 32 || s->block[0] % 32 ||
      s->block[1] != 1 || s->block[2] != 1 || s->grid[1] != 1 || s->grid[2] != 1 || s->shmem != 0 ||
      s->grid[0] != gpuc_plan_items_grid(t->items, s->block[0]))
    return gpuc_err_set(e, "%s: corrupt plan: step %u block-free launch of %llu items as grid %u block %u", path,
                        i, (unsigned long long)t->items, s->grid[0], s->block[0]);
  return 0;
}

static bool tensor_ok(const Plan *p, uint32_t t, bool optional) {
  return t < p->ntensors || (optional && t == UINT32_MAX);
}

/* The TMA descriptors (plan.h, PlanTensorMap) against their steps and
 * tensors (steps and tensors checked): a kernel step's, sorted by step, at
 * most GPUC_PLAN_TMAPS_PER_STEP a step and 64 parameters in all, the tensor
 * one of its arguments, every row of the map inside the tensor's bytes,
 * the box what a 128-byte-swizzled TMA load takes. */
static int check_tmaps(const Plan *p, const char *path, GpucErr *e) {
  for (uint32_t i = 0, run = 0; i < p->ntmaps; i++) {
    const PlanTensorMap *m = &p->tmaps[i];
    run = i && p->tmaps[i - 1].step == m->step ? run + 1 : 1;
    bool ok = m->step < p->nsteps && (i == 0 || p->tmaps[i - 1].step <= m->step) && m->tensor < p->ntensors &&
              p->steps[m->step].kind == PLAN_STEP_KERNEL && run <= GPUC_PLAN_TMAPS_PER_STEP &&
              p->steps[m->step].nargs + run <= 64 && m->swizzle == PLAN_TMAP_SWIZZLE_128B && m->reserved == 0;
    bool arg = false;
    for (uint32_t k = 0; ok && k < p->steps[m->step].nargs; k++) arg |= p->args[p->steps[m->step].args + k] == m->tensor;
    const uint64_t bytes = ok ? p->tensors[m->tensor].bytes : 0;
    ok = ok && arg && m->dims[0] >= 1 && m->dims[1] >= 1 && m->dims[0] <= ((uint64_t)1 << 32) &&
         m->dims[1] <= ((uint64_t)1 << 32) && m->row_stride % 16 == 0 && m->row_stride >= m->dims[0] &&
         m->row_stride < ((uint64_t)1 << 40) && m->dims[1] - 1 <= bytes / m->row_stride &&
         m->dims[0] <= bytes - (m->dims[1] - 1) * m->row_stride && m->box[0] >= 16 && m->box[0] <= 128 &&
         m->box[0] % 16 == 0 && m->box[1] >= 1 && m->box[1] <= 256;
    if (!ok) return gpuc_err_set(e, "%s: corrupt plan: tensor map %u", path, i);
  }
  return 0;
}

void gpuc_plan_gemm_defaults(PlanGemm *g) {
  if (g->a_dt == GPUC_DT_UNDEF) g->a_dt = g->dt;
  if (g->b_dt == GPUC_DT_UNDEF) g->b_dt = g->dt;
  if (g->y_dt == GPUC_DT_UNDEF) g->y_dt = g->dt;
}

/* Format 2-5 GEMM records are a prefix of today's (rec bytes): format 2/3
 * float GEMMs of one dtype, format 4/5 without a cuSPARSELt configuration. */
static int take_old_gemms(const uint8_t *buf, const PlanSection *tab, uint32_t ns, Plan *p, size_t rec,
                          const char *path, GpucErr *e) {
  uint8_t *raw = NULL;
  uint64_t n = 0;
  if (take(buf, tab, ns, PLAN_SEC_GEMMS, rec, (void **)&raw, &n, path, e)) return -1;
  if (n > UINT32_MAX) { free(raw); return gpuc_err_set(e, "%s: corrupt plan: section too large", path); }
  p->gemms = calloc(n + 1, sizeof *p->gemms);
  if (!p->gemms) { free(raw); return gpuc_err_set(e, "%s: out of memory", path); }
  for (uint64_t i = 0; i < n; i++) {
    memcpy(&p->gemms[i], raw + i * rec, rec);
    gpuc_plan_gemm_defaults(&p->gemms[i]);
  }
  p->ngemms = (uint32_t)n;
  free(raw);
  return 0;
}

static bool float_gemm_dt(uint32_t dt) {
  return dt == GPUC_DT_F32 || dt == GPUC_DT_F16 || dt == GPUC_DT_BF16 || dt == GPUC_DT_F64;
}

/* Tensor i is an f32 vector of n values (an FP8 GEMM's scales). */
static bool f32_vector(const Plan *p, int64_t i, int64_t n) {
  return i >= 0 && (uint64_t)i < p->ntensors && p->tensors[i].dt == GPUC_DT_F32 &&
         p->tensors[i].bytes == (uint64_t)n * 4;
}

/* An FP8 GEMM in the one form plan.h describes (PLAN_GEMM_COMPUTE_F8). */
static bool f8_gemm_ok(const Plan *p, const PlanGemm *g) {
  bool yf = g->y_dt == GPUC_DT_F32 || g->y_dt == GPUC_DT_F16 || g->y_dt == GPUC_DT_BF16;
  return g->dt == GPUC_DT_F8E4M3 && g->a_dt == GPUC_DT_F8E4M3 && g->b_dt == GPUC_DT_F8E4M3 && yf &&
         g->batch == 1 && g->alpha == 1.0f && !g->trans_a && g->trans_b && g->m > 0 && g->n > 0 &&
         g->k % 16 == 0 && g->n % 16 == 0 && g->lda % 16 == 0 && g->ldb % 16 == 0 && g->lda >= g->k &&
         g->ldb >= g->k && g->ldy >= g->n && f32_vector(p, g->stride_a, g->m) && f32_vector(p, g->stride_b, g->n) &&
         (g->c == UINT32_MAX || (g->ldc == 0 && p->tensors[g->c].dt == g->y_dt &&
                                 p->tensors[g->c].bytes == (uint64_t)g->n * gpuc_dtype_size(g->y_dt)));
}

/* The dtypes and compute type of a GEMM, against its tensors: an int8 GEMM
 * only in the one form cuBLASLt's IMMA kernels take (plan.h). */
static bool gemm_types_ok(const Plan *p, const PlanGemm *g) {
  if (g->reserved && !(g->flags & PLAN_GEMM_F_BIAS_C)) return false; /* flags: check_gemm_flags */
  if (p->tensors[g->a].dt != g->a_dt || p->tensors[g->b].dt != g->b_dt || p->tensors[g->y].dt != g->y_dt)
    return false;
  if (g->compute == PLAN_GEMM_COMPUTE_FLOAT)
    return float_gemm_dt(g->dt) && g->a_dt == g->dt && g->b_dt == g->dt && g->y_dt == g->dt;
  if (g->compute == PLAN_GEMM_COMPUTE_F8) return f8_gemm_ok(p, g);
  if (g->compute != PLAN_GEMM_COMPUTE_I32) return false;
  return g->dt == GPUC_DT_I8 && g->a_dt == GPUC_DT_I8 && g->b_dt == GPUC_DT_I8 && g->y_dt == GPUC_DT_I32 &&
         g->c == UINT32_MAX && g->batch == 1 && g->alpha == 1.0f && g->beta == 0.0f && !g->trans_a &&
         g->trans_b && g->k % 4 == 0 && g->n % 4 == 0 && g->lda % 4 == 0 && g->ldb % 4 == 0 &&
         g->ldy % 4 == 0 && g->lda >= g->k && g->ldb >= g->k && g->ldy >= g->n;
}

/* GEMM i's flag word against the GEMM (its tensor indices checked): a 2:4
 * GEMM's B must be what PLAN_GEMM_F_SPARSE24 promises, pattern included,
 * since a sparse-tensor-core run of a weight that is not 2:4 would be
 * silently wrong. */
static int check_gemm_flags(const Plan *p, uint32_t i, const char *path, GpucErr *e) {
  const PlanGemm *g = &p->gemms[i];
  uint32_t fl = g->flags;
  if (fl & ~PLAN_GEMM_F_KNOWN) return gpuc_err_set(e, "%s: corrupt plan: gemm %u flags %#x", path, i, fl);
  const int32_t *sc = g->sparse_cfg;
  if (fl & PLAN_GEMM_F_SPARSE_CFG) {
    if (!(fl & PLAN_GEMM_F_SPARSE24) || sc[0] < 0 || sc[0] > 4095 || sc[1] < 1 || sc[1] > 64 || sc[2] < 0 ||
        sc[2] > 2 || sc[3] < 0 || sc[3] > 64)
      return gpuc_err_set(e, "%s: corrupt plan: gemm %u has a cuSPARSELt configuration (%d, %d, %d, %d) that is "
                          "not one or not of a 2:4 GEMM", path, i, sc[0], sc[1], sc[2], sc[3]);
  } else if (sc[0] || sc[1] || sc[2] || sc[3])
    return gpuc_err_set(e, "%s: corrupt plan: gemm %u: a cuSPARSELt configuration without its flag", path, i);
  if (fl & PLAN_GEMM_F_BIAS_C) {
    size_t es = gpuc_dtype_size(g->dt);
    bool ok = !(fl & PLAN_GEMM_F_SPARSE24) && g->c != UINT32_MAX && g->ldc >= g->n && g->batch == 1 &&
              g->compute == PLAN_GEMM_COMPUTE_FLOAT && GPUC_GEMM_EPI(g->trans_a) == 0 &&
              tensor_ok(p, g->reserved, false) && p->tensors[g->reserved].dt == g->dt &&
              p->tensors[g->reserved].bytes == (uint64_t)g->n * es && p->tensors[g->c].dt == g->dt &&
              p->tensors[g->c].bytes >= ((uint64_t)(g->m - 1) * (uint64_t)g->ldc + (uint64_t)g->n) * es;
    if (!ok)
      return gpuc_err_set(e, "%s: corrupt plan: gemm %u adds a bias row and a matrix C, but they do not fit it",
                          path, i);
    return 0;
  }
  if (!(fl & PLAN_GEMM_F_SPARSE24)) return 0;
  const PlanTensor *b = &p->tensors[g->b];
  int64_t rows = g->trans_b ? g->n : g->k, cols = g->trans_b ? g->k : g->n;
  if (g->dt != GPUC_DT_F16 || b->dt != GPUC_DT_F16 || b->mem != PLAN_MEM_WEIGHTS || b->rank != 2 ||
      b->dims[0] != rows || b->dims[1] != cols || g->ldb != cols || g->batch != 1 || g->trans_a ||
      g->compute != PLAN_GEMM_COMPUTE_FLOAT ||
      g->m % 16 || g->n % 16 || g->k % 16 || (g->c != UINT32_MAX && g->ldc != 0) ||
      p->tensors[g->a].dt != GPUC_DT_F16 || (uint64_t)g->m > p->tensors[g->a].bytes / 2 / (uint64_t)g->k ||
      p->tensors[g->y].dt != GPUC_DT_F16 || (uint64_t)g->m > p->tensors[g->y].bytes / 2 / (uint64_t)g->n ||
      (g->c != UINT32_MAX && (p->tensors[g->c].dt != GPUC_DT_F16 || p->tensors[g->c].bytes != (uint64_t)g->n * 2)))
    return gpuc_err_set(e, "%s: corrupt plan: gemm %u is marked 2:4 but is not a half GEMM of a constant "
                        "[K,N] weight with m, n, k multiples of 16", path, i);
  Tensor w = {.dt = GPUC_DT_F16, .rank = 2, .dims = {rows, cols}, .data = p->weights + b->offset};
  if (!gpuc_tensor_is_24_sparse(&w, g->trans_b ? 1 : 0))
    return gpuc_err_set(e, "%s: corrupt plan: gemm %u is marked 2:4 but its weight has more than 2 "
                        "nonzeros in a group of 4 along K", path, i);
  return 0;
}

static int check_buckets(Plan *p, const char *path, GpucErr *e);

/* Parse and validate a plan image of `size` bytes (buf is changed: the
 * checksum field is zeroed). `container` set: the image is one of its
 * buckets, whose weights are the container's. */
static Plan *plan_parse(uint8_t *buf, uint64_t size, const char *path, const Plan *container, GpucErr *e) {
  Plan *p = calloc(1, sizeof *p);
  if (!p) { gpuc_err_set(e, "%s: out of memory", path); return NULL; }
  if (size < sizeof(PlanHeader)) BAD("%s: not a gpuc plan (too short)", path);
  PlanHeader h;
  memcpy(&h, buf, sizeof h);
  if (memcmp(h.magic, GPUC_PLAN_MAGIC, 8)) BAD("%s: not a gpuc plan (bad magic)", path);
  if (h.format_version < GPUC_PLAN_FORMAT_OLDEST || h.format_version > GPUC_PLAN_FORMAT_VERSION ||
      h.header_size != sizeof h)
    BAD("%s: plan format version %u, this gpuc reads versions %u to %u; " REBUILD, path,
        h.format_version, GPUC_PLAN_FORMAT_OLDEST, GPUC_PLAN_FORMAT_VERSION);
  if (h.file_size != size)
    BAD("%s: corrupt plan: file is %llu bytes, header says %llu (truncated?)", path,
        (unsigned long long)size, (unsigned long long)h.file_size);
  uint64_t want = h.checksum;
  memset(buf + offsetof(PlanHeader, checksum), 0, 8);
  if (gpuc_fnv1a64(buf, (size_t)size, GPUC_FNV_INIT) != want)
    BAD("%s: corrupt plan: checksum mismatch; " REBUILD, path);
  if (!container != !(h.flags & GPUC_PLAN_F_BUCKET))
    BAD("%s: corrupt plan: %s", path, container ? "a bucket's plan is not marked as one" : "a bucket's plan on its own");
  if (container && (h.format_version != container->hdr.format_version || h.sm != container->hdr.sm))
    BAD("%s: corrupt plan: a bucket's plan of another format or target than its container", path);
  if (h.nsections == 0 || h.nsections > 64 ||
      sizeof h + (uint64_t)h.nsections * sizeof(PlanSection) > size)
    BAD("%s: corrupt plan: section table", path);
  PlanSection tab[64];
  memcpy(tab, buf + sizeof h, h.nsections * sizeof(PlanSection));
  for (uint32_t i = 0; i < h.nsections; i++)
    if (tab[i].offset > size || tab[i].size > size - tab[i].offset)
      BAD("%s: corrupt plan: section %u outside the file", path, tab[i].id);
  p->hdr = h;
  uint64_t n;
  void *meta;
  if (take(buf, tab, h.nsections, PLAN_SEC_META, sizeof(PlanMeta), &meta, &n, path, e)) goto fail;
  if (n != 1) { free(meta); BAD("%s: corrupt plan: meta", path); }
  p->meta = *(PlanMeta *)meta;
  free(meta);
#define TAKE(id, field, count_field, type)                                                   \
  do {                                                                                       \
    if (take(buf, tab, h.nsections, id, sizeof(type), (void **)&p->field, &n, path, e)) goto fail; \
    if (n > UINT32_MAX) BAD("%s: corrupt plan: section too large", path);                  \
    p->count_field = (uint32_t)n;                                                            \
  } while (0)
  TAKE(PLAN_SEC_TENSORS, tensors, ntensors, PlanTensor);
  TAKE(PLAN_SEC_KERNELS, kernels, nkernels, PlanKernel);
  TAKE(PLAN_SEC_STEPS, steps, nsteps, PlanStep);
  TAKE(PLAN_SEC_ARGS, args, nargs, uint32_t);
  if (h.format_version >= 6) TAKE(PLAN_SEC_GEMMS, gemms, ngemms, PlanGemm);
  else if (take_old_gemms(buf, tab, h.nsections, p, h.format_version >= 4 ? PLAN_GEMM_V5_SIZE : PLAN_GEMM_V3_SIZE,
                          path, e))
    goto fail;
  TAKE(PLAN_SEC_CONVS, convs, nconvs, PlanConv);
  TAKE(PLAN_SEC_COSTS, costs, ncosts, PlanCost);
  if (h.format_version >= 3) TAKE(PLAN_SEC_TUNE, tune, ntune, PlanTune);
  if (h.format_version >= 7) TAKE(PLAN_SEC_TMAPS, tmaps, ntmaps, PlanTensorMap);
  if (take(buf, tab, h.nsections, PLAN_SEC_STRINGS, 1, (void **)&p->strings, &p->strings_size, path, e) ||
      take(buf, tab, h.nsections, PLAN_SEC_WEIGHTS, 1, (void **)&p->weights, &p->weights_size, path, e) ||
      take(buf, tab, h.nsections, PLAN_SEC_PTX, 1, (void **)&p->ptx, &p->ptx_size, path, e) ||
      take(buf, tab, h.nsections, PLAN_SEC_CUBIN, 1, (void **)&p->cubin, &p->cubin_size, path, e))
    goto fail;
  /* strings and PTX must end in NUL so every offset reads a bounded string */
  if (p->strings_size == 0 || p->strings[p->strings_size - 1])
    BAD("%s: corrupt plan: string table", path);
  if (p->ptx_size == 0 || p->ptx[p->ptx_size - 1]) BAD("%s: corrupt plan: PTX", path);
  if (container) { /* the container's weights, one copy */
    if (p->weights_size || p->meta.weight_bytes != container->weights_size)
      BAD("%s: corrupt plan: a bucket's plan with weights of its own", path);
    free(p->weights);
    p->weights = container->weights;
    p->weights_size = container->weights_size;
    p->weights_borrowed = true;
  }
  if (p->meta.weight_bytes != p->weights_size) BAD("%s: corrupt plan: weights size", path);
  if (h.format_version >= 5) {
    uint8_t *blob = NULL;
    uint64_t blob_size = 0;
    TAKE(PLAN_SEC_AXES, axes, naxes, PlanAxis);
    TAKE(PLAN_SEC_BUCKETS, buckets, nbuckets, PlanBucket);
    TAKE(PLAN_SEC_DIMUSE, dimuse, ndimuse, PlanDimUse);
    if (take(buf, tab, h.nsections, PLAN_SEC_BUCKET_PLANS, 1, (void **)&blob, &blob_size, path, e)) goto fail;
    if (container && (p->naxes || p->nbuckets || p->ndimuse || blob_size)) {
      free(blob);
      BAD("%s: corrupt plan: a bucket's plan with buckets of its own", path);
    }
    if (p->nbuckets > GPUC_PLAN_MAX_BUCKETS || (p->nbuckets != 0) != (p->naxes != 0)) {
      free(blob);
      BAD("%s: corrupt plan: %u buckets over %u axes", path, p->nbuckets, p->naxes);
    }
    if (p->nbuckets) {
      p->bucket_plans = calloc(p->nbuckets, sizeof *p->bucket_plans);
      if (!p->bucket_plans) { free(blob); BAD("%s: out of memory", path); }
    }
    uint64_t end = 0; /* the images lie in order without overlap: what is parsed is at most the file */
    for (uint32_t i = 0; i < p->nbuckets; i++) {
      const PlanBucket *b = &p->buckets[i];
      if (b->bytes == 0) { p->bucket_plans[i] = p; continue; }
      if (b->offset < end || b->offset > blob_size || b->bytes > blob_size - b->offset) {
        free(blob);
        BAD("%s: corrupt plan: bucket %u lies outside the bucket section or over another's", path, i);
      }
      end = b->offset + b->bytes;
      char what[4200];
      snprintf(what, sizeof what, "%s (bucket %u)", path, i);
      if (!(p->bucket_plans[i] = plan_parse(blob + b->offset, b->bytes, what, p, e))) { free(blob); goto fail; }
    }
    free(blob);
  }
#undef TAKE
  if (p->ncosts != p->nsteps)
    BAD("%s: corrupt plan: cost section has %u entries for %u steps", path, p->ncosts, p->nsteps);
  if (h.format_version < 3) { /* before the TUNE section: every step as compiled */
    for (uint32_t i = 0; i < h.nsections; i++)
      if (tab[i].id == PLAN_SEC_TUNE) BAD("%s: corrupt plan: a format %u plan with a tune section", path, h.format_version);
    p->tune = calloc(p->nsteps + 1, sizeof *p->tune);
    if (!p->tune) BAD("%s: out of memory", path);
    p->ntune = p->nsteps;
  }
  if (p->ntune != p->nsteps)
    BAD("%s: corrupt plan: tune section has %u entries for %u steps", path, p->ntune, p->nsteps);
  for (uint32_t i = 0; i < p->ntensors; i++)
    if (check_tensor(p, i, path, e)) goto fail;
  for (uint32_t i = 0; i < p->nkernels; i++)
    if (p->kernels[i].name >= p->strings_size) BAD("%s: corrupt plan: kernel %u name", path, i);
  for (uint32_t i = 0; i < p->nargs; i++)
    if (!tensor_ok(p, p->args[i], false)) BAD("%s: corrupt plan: argument %u", path, i);
  for (uint32_t i = 0; i < p->ngemms; i++) {
    const PlanGemm *g = &p->gemms[i];
    if (!tensor_ok(p, g->a, false) || !tensor_ok(p, g->b, false) || !tensor_ok(p, g->c, true) ||
        !tensor_ok(p, g->y, false) || g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0 ||
        g->algo_index >= GPUC_GEMM_TUNE_MAX || !gemm_types_ok(p, g) || (g->trans_a & ~0xff01u) ||
        GPUC_GEMM_EPI(g->trans_a) > GPUC_GEMM_EPI_GELU ||
        (GPUC_GEMM_EPI(g->trans_a) && (g->c == UINT32_MAX || g->ldc != 0 || p->hdr.format_version < 4 ||
                                       g->compute != PLAN_GEMM_COMPUTE_FLOAT)))
      BAD("%s: corrupt plan: gemm %u", path, i);
    if (check_gemm_flags(p, i, path, e)) goto fail;
  }
  for (uint32_t i = 0; i < p->nconvs; i++) {
    const PlanConv *c = &p->convs[i];
    if (!tensor_ok(p, c->x, false) || !tensor_ok(p, c->w, false) || !tensor_ok(p, c->b, true) ||
        !tensor_ok(p, c->y, false) || !tensor_ok(p, c->z, true) || GPUC_CONV_ACT(c->act) > 1 ||
        GPUC_CONV_LAYOUT(c->act) > GPUC_LAYOUT_NHWC || (c->act >> 16) != 0 ||
        (GPUC_CONV_LAYOUT(c->act) == GPUC_LAYOUT_NHWC &&
         (c->nspatial != 2 || p->tensors[c->x].rank != 4 || p->tensors[c->w].rank != 4 ||
          p->tensors[c->y].rank != 4)) ||
        (c->z != UINT32_MAX && c->b == UINT32_MAX) ||
        c->nspatial < 2 || c->nspatial > 3 || c->groups == 0 ||
        c->workspace > p->meta.workspace_bytes || c->mode > PLAN_CONV_BWD_FILTER || c->algo < -1 || c->algo > 15 ||
        (c->mode != PLAN_CONV_FWD && (c->b != UINT32_MAX || c->act != 0)))
      BAD("%s: corrupt plan: conv %u", path, i);
  }
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    uint32_t lim = s->kind == PLAN_STEP_KERNEL ? p->nkernels
                 : s->kind == PLAN_STEP_GEMM ? p->ngemms
                 : s->kind == PLAN_STEP_CONV ? p->nconvs : 0;
    if (s->index >= lim || s->args > p->nargs || s->nargs > p->nargs - s->args ||
        s->nodes >= p->strings_size || s->nargs > 64)
      BAD("%s: corrupt plan: step %u", path, i);
    if (s->kind == PLAN_STEP_KERNEL &&
        (s->grid[0] == 0 || s->grid[1] == 0 || s->grid[2] == 0 || s->block[0] == 0 ||
         s->block[1] == 0 || s->block[2] == 0 ||
         (uint64_t)s->block[0] * s->block[1] * s->block[2] > 1024 || s->shmem > 228 * 1024))
      BAD("%s: corrupt plan: step %u launch shape", path, i);
    if (check_tune(p, i, path, e)) goto fail;
  }
  if (check_tmaps(p, path, e)) goto fail;
  if (p->nbuckets && check_buckets(p, path, e)) goto fail;
  return p;
fail:
  gpuc_plan_free(p);
  return NULL;
}

Plan *gpuc_plan_read(const char *path, GpucErr *e) {
  FILE *f = fopen(path, "rb");
  if (!f) { gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
  struct stat st;
  uint8_t *buf = NULL;
  Plan *p = NULL;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) gpuc_err_set(e, "%s: not a regular file", path);
  else if ((uint64_t)st.st_size < sizeof(PlanHeader)) gpuc_err_set(e, "%s: not a gpuc plan (too short)", path);
  else if ((uint64_t)st.st_size > GPUC_PLAN_MAX_BYTES) gpuc_err_set(e, "%s: plan larger than 64 GiB", path);
  else if (!(buf = malloc((size_t)st.st_size))) gpuc_err_set(e, "%s: out of memory reading plan", path);
  else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) gpuc_err_set(e, "%s: read error", path);
  else p = plan_parse(buf, (uint64_t)st.st_size, path, NULL, e);
  free(buf);
  fclose(f);
  return p;
}

/* The C API's plans in memory (runtime/api_runtime.c): the file image,
 * bucket images inside it included, and a plan parsed from a copy of
 * caller-owned bytes. */
int gpuc_plan_to_bytes(const Plan *p, const char *path, uint8_t **out, uint64_t *size, GpucErr *e) {
  return plan_image(p, NULL, out, size, path, e);
}

Plan *gpuc_plan_from_bytes(const void *data, uint64_t size, const char *what, GpucErr *e) {
  if (size < sizeof(PlanHeader)) { gpuc_err_set(e, "%s: not a gpuc plan (too short)", what); return NULL; }
  if (size > GPUC_PLAN_MAX_BYTES) { gpuc_err_set(e, "%s: plan larger than 64 GiB", what); return NULL; }
  uint8_t *buf = malloc((size_t)size);
  if (!buf) { gpuc_err_set(e, "%s: out of memory reading plan", what); return NULL; }
  memcpy(buf, data, (size_t)size);
  Plan *p = plan_parse(buf, size, what, NULL, e);
  free(buf);
  return p;
}

static const char *role_name(int r) {
  static const char *n[] = {"internal", "input", "output", "const", "input+output"};
  return r >= 0 && r <= 4 ? n[r] : "?";
}

/* The fp16 policy's fp32 islands, as the plan shows them: steps whose
 * result is stored in f32/f64 (a kernel's last argument is its output;
 * GEMMs and convolutions carry their dtype). The casts that hand the
 * model's f32 outputs back count too. */
static void print_fp32_steps(const Plan *p, FILE *f) {
  uint32_t n = 0;
  const char *half = (p->hdr.flags & GPUC_PLAN_F_BF16) ? "bf16" : "fp16";
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) fprintf(f, "fp32 steps in this %s plan: %u\n", half, n);
    for (uint32_t i = 0; i < p->nsteps; i++) {
      const PlanStep *s = &p->steps[i];
      uint32_t dt;
      if (s->kind == PLAN_STEP_GEMM) dt = p->gemms[s->index].dt;
      else if (s->kind == PLAN_STEP_CONV) dt = p->convs[s->index].dt;
      else if (s->nargs > 0) dt = p->tensors[p->args[s->args + s->nargs - 1]].dt;
      else continue;
      if (dt != GPUC_DT_F32 && dt != GPUC_DT_F64) continue;
      if (pass == 0) n++;
      else fprintf(f, "  %4u %s <- %s\n", i, gpuc_dtype_name((GpucDType)dt), gpuc_plan_str(p, s->nodes));
    }
  }
}

/* --int8's layers: the int8 GEMM steps, by the ONNX nodes they cover. */
static void print_int8_steps(const Plan *p, FILE *f) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->nsteps; i++)
    n += p->steps[i].kind == PLAN_STEP_GEMM && p->gemms[p->steps[i].index].compute == PLAN_GEMM_COMPUTE_I32;
  if (n == 0) return;
  fprintf(f, "int8 GEMMs: %u", n);
  for (uint32_t i = 0, k = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == PLAN_STEP_GEMM && p->gemms[p->steps[i].index].compute == PLAN_GEMM_COMPUTE_I32)
      fprintf(f, "%s%s", k++ ? ", " : ": ", gpuc_plan_str(p, p->steps[i].nodes));
  fprintf(f, "\n");
}

/* --fp8's layers: the FP8 GEMM steps, by the ONNX nodes they cover. */
static void print_fp8_steps(const Plan *p, FILE *f) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->nsteps; i++)
    n += p->steps[i].kind == PLAN_STEP_GEMM && p->gemms[p->steps[i].index].compute == PLAN_GEMM_COMPUTE_F8;
  if (n == 0) return;
  fprintf(f, "fp8 GEMMs: %u", n);
  for (uint32_t i = 0, k = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == PLAN_STEP_GEMM && p->gemms[p->steps[i].index].compute == PLAN_GEMM_COMPUTE_F8)
      fprintf(f, "%s%s", k++ ? ", " : ": ", gpuc_plan_str(p, p->steps[i].nodes));
  fprintf(f, "\n");
}

/* A bucket plan's axes and buckets (the schedule above is the last, largest bucket's). */
static void print_buckets(const Plan *p, FILE *f) {
  if (!p->nbuckets) return;
  fprintf(f, "buckets: %u, one schedule each, weights stored once (%llu bytes), one arena of the largest:\n",
          p->nbuckets, (unsigned long long)p->weights_size);
  for (uint32_t a = 0; a < p->naxes; a++) {
    const PlanAxis *x = &p->axes[a];
    fprintf(f, "  axis %u '%s': %lld..%lld, %s\n", a, gpuc_plan_str(p, x->name), (long long)x->lo, (long long)x->hi,
            (x->flags & PLAN_AXIS_F_BATCH)    ? "batch: padded by repeating the last row, outputs sliced"
            : (x->flags & PLAN_AXIS_F_MASKED) ? "sequence: padded with zeros under the attention mask, outputs sliced"
                                              : "not padded (no attention mask): a shape must equal a bucket's size");
  }
  for (uint32_t k = 0; k < p->ndimuse; k++)
    fprintf(f, "  %s '%s' dim %u follows axis '%s'\n", p->dimuse[k].is_output ? "output" : "input",
            gpuc_plan_str(p, p->dimuse[k].name), p->dimuse[k].dim, gpuc_plan_str(p, p->axes[p->dimuse[k].axis].name));
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    const Plan *b = gpuc_plan_bucket(p, i);
    char sz[128] = "";
    for (uint32_t a = 0, n = 0; a < p->naxes; a++)
      n += (uint32_t)snprintf(sz + n, sizeof sz - n, "%s%lld", a ? "x" : "", (long long)p->buckets[i].size[a]);
    uint64_t flops = 0;
    for (uint32_t k = 0; k < b->nsteps; k++) flops += b->costs[k].flops;
    fprintf(f, "  bucket %2u %-12s %4u steps, %3u kernels, %3u GEMMs, %3u convs, arena %llu bytes, "
            "CUBIN %llu bytes, %llu flops%s\n", i, sz, b->nsteps, b->nkernels, b->ngemms, b->nconvs,
            (unsigned long long)b->meta.arena_bytes, (unsigned long long)b->cubin_size, (unsigned long long)flops,
            b == p ? " (the schedule above)" : "");
  }
}

void gpuc_plan_print(const Plan *p, const char *path, FILE *f) {
  fprintf(f, "plan: %s\nformat %u, built by gpuc %.16s, target sm_%u%s%s\n", path,
          p->hdr.format_version, p->hdr.gpuc_version, p->hdr.sm,
          (p->hdr.flags & GPUC_PLAN_F_ARCH_SPECIFIC) ? "a (arch-specific: runs on this GPU generation only)" : "",
          (p->hdr.flags & GPUC_PLAN_F_FP16) ? ", fp16" : (p->hdr.flags & GPUC_PLAN_F_BF16) ? ", bf16" : "");
  fprintf(f, "arena: %llu bytes (naive sum %llu), workspace %llu bytes, weights %llu bytes\n",
          (unsigned long long)p->meta.arena_bytes, (unsigned long long)p->meta.naive_bytes,
          (unsigned long long)p->meta.workspace_bytes, (unsigned long long)p->meta.weight_bytes);
  fprintf(f, "module: %u kernels, PTX %llu bytes, CUBIN %llu bytes (sm_%u)\n", p->nkernels,
          (unsigned long long)p->ptx_size, (unsigned long long)p->cubin_size, p->hdr.sm);
  fprintf(f, "tensors (inputs and outputs):\n");
  for (uint32_t i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    if (t->role != PLAN_ROLE_INPUT && t->role != PLAN_ROLE_OUTPUT && t->role != PLAN_ROLE_INPUT_OUTPUT) continue;
    Tensor d = {.dt = t->dt, .rank = t->rank};
    memcpy(d.dims, t->dims, sizeof d.dims);
    char s[200];
    gpuc_shape_str(&d, s, sizeof s);
    fprintf(f, "  %-8s %s: %s %s\n", role_name(t->role), gpuc_plan_str(p, t->name), s,
            gpuc_dtype_name(t->dt));
  }
  uint64_t bytes = 0, flops = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) { bytes += p->costs[i].bytes; flops += p->costs[i].flops; }
  fprintf(f, "schedule (%u steps; %llu bytes moved, %llu flops, counted from the IR):\n", p->nsteps,
          (unsigned long long)bytes, (unsigned long long)flops);
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    char what[224], maps[32] = "";
    uint32_t nmaps = 0; /* TMA descriptors the step takes (format 7) */
    for (uint32_t j = 0; j < p->ntmaps; j++) nmaps += p->tmaps[j].step == i;
    if (nmaps) snprintf(maps, sizeof maps, " (%u TMA maps)", nmaps);
    if (s->kind == PLAN_STEP_KERNEL)
      snprintf(what, sizeof what, "kernel %-28s grid %u block %u%s%s",
               gpuc_plan_str(p, p->kernels[s->index].name), s->grid[0] * s->grid[1] * s->grid[2],
               s->block[0] * s->block[1] * s->block[2],
               i >= p->ntune                                 ? ""
               : (p->tune[i].flags & PLAN_TUNE_F_BLOCK_TUNED) ? " (tuned)"
               : (p->tune[i].flags & PLAN_TUNE_F_BLOCK_FREE)  ? " (free)"
               : (p->tune[i].flags & PLAN_TUNE_F_TENSOR_MATH) ? " (tensor cores)" : "", maps);
    else if (s->kind == PLAN_STEP_GEMM) {
      const PlanGemm *g = &p->gemms[s->index];
      uint32_t epi = GPUC_GEMM_EPI(g->trans_a);
      char cfg[64] = "";
      if (g->flags & PLAN_GEMM_F_SPARSE_CFG) /* -O3's cuSPARSELt search */
        snprintf(cfg, sizeof cfg, " (searched config %d, split-K %d/%d/%d)", g->sparse_cfg[0], g->sparse_cfg[1],
                 g->sparse_cfg[2], g->sparse_cfg[3]);
      snprintf(what, sizeof what, "%s gemm%s %lldx%lldx%lld batch %lld%s%s",
               (g->flags & PLAN_GEMM_F_SPARSE24) ? "2:4 sparse" : "cublasLt",
               g->compute == PLAN_GEMM_COMPUTE_I32 ? " int8" : g->compute == PLAN_GEMM_COMPUTE_F8 ? " fp8" : "",
               (long long)g->m, (long long)g->n,
               (long long)g->k, (long long)g->batch,
               epi == GPUC_GEMM_EPI_RELU ? " +bias+relu" : epi == GPUC_GEMM_EPI_GELU ? " +bias+gelu" : "", cfg);
    } else
      snprintf(what, sizeof what, "cudnn conv%s%s", p->convs[s->index].nspatial == 3 ? "3d" : "2d",
               p->convs[s->index].mode == PLAN_CONV_BWD_DATA     ? " backward data"
               : p->convs[s->index].mode == PLAN_CONV_BWD_FILTER ? " backward filter"
               : GPUC_CONV_LAYOUT(p->convs[s->index].act) == GPUC_LAYOUT_NHWC ? " nhwc" : "");
    fprintf(f, "  %4u %s  bytes %llu flops %llu  <- %s\n", i, what,
            (unsigned long long)p->costs[i].bytes, (unsigned long long)p->costs[i].flops,
            gpuc_plan_str(p, s->nodes));
  }
  uint32_t nk = 0, nfree = 0, ntuned = 0;
  for (uint32_t i = 0; i < p->nsteps && i < p->ntune; i++) {
    nk += p->steps[i].kind == PLAN_STEP_KERNEL;
    nfree += (p->tune[i].flags & PLAN_TUNE_F_BLOCK_FREE) != 0;
    ntuned += (p->tune[i].flags & PLAN_TUNE_F_BLOCK_TUNED) != 0;
  }
  fprintf(f, "block-size-free kernels: %u of %u, %u with a block -O3 chose\n", nfree, nk, ntuned);
  print_int8_steps(p, f);
  print_fp8_steps(p, f);
  print_buckets(p, f);
  if (p->hdr.flags & (GPUC_PLAN_F_FP16 | GPUC_PLAN_F_BF16)) print_fp32_steps(p, f);
}

/* The plan's input (output) tensor named `name`, or -1. */
int gpuc_plan_io_index(const Plan *p, const char *name, bool output) {
  for (uint32_t i = 0; i < p->ntensors; i++) {
    int r = p->tensors[i].role;
    bool io = output ? (r == PLAN_ROLE_OUTPUT || r == PLAN_ROLE_INPUT_OUTPUT)
                     : (r == PLAN_ROLE_INPUT || r == PLAN_ROLE_INPUT_OUTPUT);
    if (io && !strcmp(gpuc_plan_str(p, p->tensors[i].name), name)) return (int)i;
  }
  return -1;
}

static uint32_t io_count(const Plan *p) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->ntensors; i++) n += p->tensors[i].role == PLAN_ROLE_INPUT ||
                                                  p->tensors[i].role == PLAN_ROLE_OUTPUT ||
                                                  p->tensors[i].role == PLAN_ROLE_INPUT_OUTPUT;
  return n;
}

/* A bucket plan's tables against its buckets' plans: the padding and
 * slicing of runtime/buckets.c index host buffers by these dims, so every
 * bucket must have the container's inputs and outputs, each dim either the
 * same everywhere or its axis's size in that bucket. */
static int check_buckets(Plan *p, const char *path, GpucErr *e) {
  if (p->naxes > GPUC_PLAN_MAX_AXES) return gpuc_err_set(e, "%s: corrupt plan: %u axes", path, p->naxes);
  /* bounds that keep the checks below linear in the file */
  if (io_count(p) > 256 || p->ndimuse > 256 * GPUC_MAX_RANK)
    return gpuc_err_set(e, "%s: corrupt plan: a bucket plan of %u inputs/outputs and %u dim uses (at most 256 and %d)",
                        path, io_count(p), p->ndimuse, 256 * GPUC_MAX_RANK);
  for (uint32_t a = 0; a < p->naxes; a++) {
    const PlanAxis *x = &p->axes[a];
    if (x->name >= p->strings_size || (x->flags & ~(uint32_t)(PLAN_AXIS_F_BATCH | PLAN_AXIS_F_MASKED)) ||
        x->lo < 1 || x->lo > x->hi || x->hi > ((int64_t)1 << 31))
      return gpuc_err_set(e, "%s: corrupt plan: axis %u", path, a);
  }
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    const PlanBucket *b = &p->buckets[i];
    bool last = i + 1 == p->nbuckets;
    if ((b->bytes == 0) != last) return gpuc_err_set(e, "%s: corrupt plan: bucket %u: only the last is the container", path, i);
    for (uint32_t a = 0; a < GPUC_PLAN_MAX_AXES; a++) {
      bool ok = a < p->naxes ? b->size[a] >= p->axes[a].lo && b->size[a] <= p->axes[a].hi &&
                               (!last || b->size[a] == p->axes[a].hi)
                             : b->size[a] == 0;
      if (!ok) return gpuc_err_set(e, "%s: corrupt plan: bucket %u size on axis %u", path, i, a);
    }
    for (uint32_t j = 0; j < i; j++)
      if (!memcmp(p->buckets[j].size, b->size, sizeof b->size))
        return gpuc_err_set(e, "%s: corrupt plan: buckets %u and %u have one shape", path, j, i);
  }
  for (uint32_t k = 0; k < p->ndimuse; k++) {
    const PlanDimUse *u = &p->dimuse[k];
    if (u->name >= p->strings_size || u->axis >= p->naxes || u->is_output > 1 || u->reserved)
      return gpuc_err_set(e, "%s: corrupt plan: dim use %u", path, k);
    for (uint32_t j = 0; j < k; j++)
      if (p->dimuse[j].name == u->name && p->dimuse[j].dim == u->dim && p->dimuse[j].is_output == u->is_output)
        return gpuc_err_set(e, "%s: corrupt plan: dim use %u repeats %u", path, k, j);
  }
  uint32_t nio = io_count(p);
  for (uint32_t i = 0; i < p->nbuckets; i++) {
    const Plan *b = p->bucket_plans[i];
    if (io_count(b) != nio) return gpuc_err_set(e, "%s: corrupt plan: bucket %u has other inputs/outputs", path, i);
    for (uint32_t t = 0; t < p->ntensors; t++) {
      const PlanTensor *ct = &p->tensors[t];
      for (int out = 0; out < 2; out++) {
        bool io = out ? (ct->role == PLAN_ROLE_OUTPUT || ct->role == PLAN_ROLE_INPUT_OUTPUT)
                      : (ct->role == PLAN_ROLE_INPUT || ct->role == PLAN_ROLE_INPUT_OUTPUT);
        if (!io) continue;
        const char *name = gpuc_plan_str(p, ct->name);
        int bi = gpuc_plan_io_index(b, name, out);
        if (bi < 0 || b->tensors[bi].dt != ct->dt || b->tensors[bi].rank != ct->rank)
          return gpuc_err_set(e, "%s: corrupt plan: bucket %u: %s '%s' differs", path, i, out ? "output" : "input", name);
        for (int d = 0; d < ct->rank; d++) {
          int64_t want = ct->dims[d];
          for (uint32_t k = 0; k < p->ndimuse; k++) {
            const PlanDimUse *u = &p->dimuse[k];
            if (u->is_output == out && u->dim == d && !strcmp(gpuc_plan_str(p, u->name), name))
              want = p->buckets[i].size[u->axis];
          }
          if (b->tensors[bi].dims[d] != want)
            return gpuc_err_set(e, "%s: corrupt plan: bucket %u: %s '%s' dim %d is %lld, not %lld", path, i,
                                out ? "output" : "input", name, d, (long long)b->tensors[bi].dims[d], (long long)want);
        }
      }
    }
  }
  for (uint32_t k = 0; k < p->ndimuse; k++) /* every dim use names an input or output */
    if (gpuc_plan_io_index(p, gpuc_plan_str(p, p->dimuse[k].name), p->dimuse[k].is_output) < 0 ||
        p->dimuse[k].dim >= p->tensors[gpuc_plan_io_index(p, gpuc_plan_str(p, p->dimuse[k].name), p->dimuse[k].is_output)].rank)
      return gpuc_err_set(e, "%s: corrupt plan: dim use %u names no input/output dim", path, k);
  return 0;
}
