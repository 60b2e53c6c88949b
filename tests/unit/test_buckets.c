/* Bucket plans (plan.h format 5 and later, runtime/buckets.c, codegen/plan_buckets.c),
 * no GPU: the selection of a bucket, the padding of inputs and slicing of
 * outputs, the refusals (outside the range, a dim that cannot be padded,
 * inputs that disagree); a real bucket plan of mlp.onnx (weights stored
 * once, one arena of the largest, the bucket table, write -> read -> write
 * byte-exact, corrupt tables and other formats refused); and on the CPU
 * reference, a padded run sliced back equals the unpadded run: mlp at batch
 * 5 in its 16 bucket (rows repeated), tiny_bert at batch 3 x sequence 5 in
 * its 4 x 8 bucket (the padding masked); the corner walk both the host's
 * padding and the C API's device copies use, on random shapes. fp32 throughout: the padded rows
 * and masked keys add exact zeros, so the bound is 1e-6 relative L2.
 * usage: test_buckets MODELS_DIR ZOO_DIR WORK_DIR */
#include "check.h"
#include "compile_model.h"
#include "buckets.h"
#include "plan_buckets.h"
#include "ref.h"
#include "ref_random.h"
#include <math.h>
#include <sys/stat.h>

/* ---- a plan of tables only: input_ids, attention_mask [batch, seq] (i64),
 * output [batch, seq, 32] (f32); batch 1..4, seq 4..16, buckets the cross
 * product of {1,2,4} x {4,8,16} ---- */
static char synth_strings[] = "input_ids\0attention_mask\0output\0batch\0seq";
enum { S_IDS = 0, S_MASK = 10, S_OUT = 25, S_BATCH = 32, S_SEQ = 38 };

static Plan *synth_plan(uint32_t seq_flags) {
  Plan *p = calloc(1, sizeof *p);
  p->strings = malloc(sizeof synth_strings);
  memcpy(p->strings, synth_strings, sizeof synth_strings);
  p->strings_size = sizeof synth_strings;
  p->ntensors = 3;
  p->tensors = calloc(3, sizeof *p->tensors);
  p->tensors[0] = (PlanTensor){.name = S_IDS, .dt = GPUC_DT_I64, .rank = 2, .role = PLAN_ROLE_INPUT, .dims = {4, 16}};
  p->tensors[1] = (PlanTensor){.name = S_MASK, .dt = GPUC_DT_I64, .rank = 2, .role = PLAN_ROLE_INPUT, .dims = {4, 16}};
  p->tensors[2] = (PlanTensor){.name = S_OUT, .dt = GPUC_DT_F32, .rank = 3, .role = PLAN_ROLE_OUTPUT, .dims = {4, 16, 32}};
  p->naxes = 2;
  p->axes = calloc(2, sizeof *p->axes);
  p->axes[0] = (PlanAxis){.name = S_BATCH, .flags = PLAN_AXIS_F_BATCH, .lo = 1, .hi = 4};
  p->axes[1] = (PlanAxis){.name = S_SEQ, .flags = seq_flags, .lo = 4, .hi = 16};
  static const int64_t b[3] = {1, 2, 4}, s[3] = {4, 8, 16};
  p->nbuckets = 9;
  p->buckets = calloc(9, sizeof *p->buckets);
  for (int i = 0; i < 9; i++) { p->buckets[i].size[0] = b[i / 3]; p->buckets[i].size[1] = s[i % 3]; }
  p->ndimuse = 6;
  p->dimuse = calloc(6, sizeof *p->dimuse);
  PlanDimUse u[6] = {{S_IDS, 0, 0, 0, 0}, {S_IDS, 1, 1, 0, 0}, {S_MASK, 0, 0, 0, 0},
                     {S_MASK, 1, 1, 0, 0}, {S_OUT, 0, 0, 1, 0}, {S_OUT, 1, 1, 1, 0}};
  memcpy(p->dimuse, u, sizeof u);
  return p;
}

static Tensor *i64_tensor(int64_t b, int64_t s, int64_t base) {
  GpucErr e = {0};
  int64_t dims[2] = {b, s};
  Tensor *t = gpuc_tensor_new(GPUC_DT_I64, 2, dims, &e);
  for (int64_t i = 0; i < b * s; i++) ((int64_t *)t->data)[i] = base + i;
  return t;
}

static int select_for(const Plan *p, int64_t b, int64_t s, int64_t mask_s, GpucErr *e) {
  Tensor *ids = i64_tensor(b, s, 1), *mask = i64_tensor(b, mask_s, 1);
  const char *names[2] = {"input_ids", "attention_mask"};
  const Tensor *ins[2] = {ids, mask};
  int64_t actual[GPUC_PLAN_MAX_AXES];
  int k = gpuc_bucket_actual(p, 2, names, ins, actual, e) ? -1 : gpuc_bucket_select(p, actual, e);
  gpuc_tensor_free(ids);
  gpuc_tensor_free(mask);
  return k;
}

static void test_selection(void) {
  Plan *p = synth_plan(PLAN_AXIS_F_MASKED);
  GpucErr e = {0};
  CHECK(select_for(p, 3, 5, 5, &e) == 7, "3x5 runs in the 4x8 bucket (7): %s", e.msg);
  CHECK(select_for(p, 1, 4, 4, &e) == 0, "1x4 runs in the first bucket");
  CHECK(select_for(p, 4, 16, 16, &e) == 8, "4x16 runs in the last bucket");
  CHECK(select_for(p, 2, 9, 9, &e) == 5, "2x9 runs in the 2x16 bucket (5)");
  CHECK(select_for(p, 1, 16, 16, &e) == 2, "1x16 runs in the 1x16 bucket, not a larger batch");
  e = (GpucErr){0};
  CHECK(select_for(p, 5, 8, 8, &e) < 0 && strstr(e.msg, "outside the range 1..4") && strstr(e.msg, "batch"),
        "batch 5 is refused naming the range: %s", e.msg);
  e = (GpucErr){0};
  CHECK(select_for(p, 2, 3, 3, &e) < 0 && strstr(e.msg, "outside the range 4..16") && strstr(e.msg, "seq"),
        "sequence 3 is refused naming the range: %s", e.msg);
  e = (GpucErr){0};
  CHECK(select_for(p, 2, 8, 9, &e) < 0 && strstr(e.msg, "attention_mask") && strstr(e.msg, "but input"),
        "inputs that disagree on an axis are refused: %s", e.msg);
  /* a float where the plan takes int64 */
  int64_t dims[2] = {2, 8};
  Tensor *f = gpuc_tensor_new(GPUC_DT_F32, 2, dims, &e);
  Tensor *m = i64_tensor(2, 8, 0);
  const char *names[2] = {"input_ids", "attention_mask"};
  const Tensor *ins[2] = {f, m};
  int64_t actual[GPUC_PLAN_MAX_AXES];
  e = (GpucErr){0};
  CHECK(gpuc_bucket_actual(p, 2, names, ins, actual, &e) < 0 && strstr(e.msg, "f32"), "a wrong dtype is refused: %s",
        e.msg);
  const char *bogus[1] = {"pixels"};
  e = (GpucErr){0};
  CHECK(gpuc_bucket_actual(p, 1, bogus, ins, actual, &e) < 0 && strstr(e.msg, "no input named 'pixels'"),
        "an unknown input is refused: %s", e.msg);
  gpuc_tensor_free(f);
  gpuc_tensor_free(m);
  gpuc_plan_free(p);
  /* without an attention mask the sequence cannot be padded */
  p = synth_plan(0);
  e = (GpucErr){0};
  CHECK(select_for(p, 3, 5, 5, &e) < 0 && strstr(e.msg, "cannot be padded") && strstr(e.msg, "4, 8, 16"),
        "an unpaddable sequence of 5 is refused, naming the sizes it runs at: %s", e.msg);
  e = (GpucErr){0};
  CHECK(select_for(p, 3, 8, 8, &e) == 7, "an unpaddable sequence at a bucket size runs (batch still padded): %s",
        e.msg);
  gpuc_plan_free(p);
}

static void test_pad_slice(void) {
  Plan *p = synth_plan(PLAN_AXIS_F_MASKED);
  GpucErr e = {0};
  Tensor *ids = i64_tensor(3, 5, 100); /* row r, col c = 100 + 5r + c */
  Tensor *x = gpuc_bucket_pad(p, "input_ids", ids, p->buckets[7].size, &e);
  CHECK(x && x->rank == 2 && x->dims[0] == 4 && x->dims[1] == 8, "padded to 4x8: %s", e.msg);
  bool ok = x != NULL;
  for (int r = 0; ok && r < 4; r++)
    for (int c = 0; c < 8; c++) {
      int64_t v = ((int64_t *)x->data)[r * 8 + c];
      int src = r < 3 ? r : 2; /* the batch repeats its last row */
      int64_t want = c < 5 ? 100 + 5 * src + c : 0; /* the sequence is padded with zeros */
      if (v != want) { ok = false; CHECK(0, "padded [%d,%d] = %lld, want %lld", r, c, (long long)v, (long long)want); }
    }
  CHECK(ok, "batch rows repeat the last, sequence pads with zeros");
  int64_t odims[3] = {4, 8, 32};
  Tensor *y = gpuc_tensor_new(GPUC_DT_F32, 3, odims, &e);
  for (int i = 0; i < 4 * 8 * 32; i++) ((float *)y->data)[i] = (float)i;
  int64_t actual[GPUC_PLAN_MAX_AXES] = {3, 5};
  Tensor *z = gpuc_bucket_slice(p, "output", y, actual, &e);
  CHECK(z && z->dims[0] == 3 && z->dims[1] == 5 && z->dims[2] == 32, "sliced to 3x5x32: %s", e.msg);
  ok = z != NULL;
  for (int r = 0; ok && r < 3; r++)
    for (int c = 0; c < 5; c++)
      for (int h = 0; h < 32; h++)
        ok = ok && ((float *)z->data)[(r * 5 + c) * 32 + h] == (float)((r * 8 + c) * 32 + h);
  CHECK(ok, "the slice keeps the leading corner");
  CHECK(gpuc_bucket_arena_bytes(p) == 0, "arena of a table-only plan");
  gpuc_tensor_free(ids);
  gpuc_tensor_free(x);
  gpuc_tensor_free(y);
  gpuc_tensor_free(z);
  gpuc_plan_free(p);
}

/* ---- a real bucket plan: mlp.onnx, batch 1..64 in buckets 1, 16, 64 ---- */

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

/* Fix the checksum after patching bytes of a plan image. */
static void fix_checksum(unsigned char *c, size_t n) {
  PlanHeader h;
  memcpy(&h, c, sizeof h);
  h.checksum = 0;
  memcpy(c, &h, sizeof h);
  h.checksum = gpuc_fnv1a64(c, n, GPUC_FNV_INIT);
  memcpy(c, &h, sizeof h);
}

static void expect_refused(const char *path, const char *needle, const char *what) {
  GpucErr e = {0};
  Plan *q = gpuc_plan_read(path, &e);
  CHECK(!q && strstr(e.msg, needle), "%s is refused (%s): %s", what, needle, q ? "(read)" : e.msg);
  gpuc_plan_free(q);
}

/* Mutants of the bucket plan at `path` (its tables and the buckets' images,
 * the checksums sealed again, the bucket's own too when the byte lies in
 * one): read without a crash, refused with a message or accepted whole. */
static void fuzz_tables(const char *path, const char *mutant, const Plan *q) {
  size_t n = 0;
  unsigned char *img = slurp(path, &n);
  if (!img) { CHECK(0, "read %s", path); return; }
  PlanHeader h;
  PlanSection tab[64];
  memcpy(&h, img, sizeof h);
  memcpy(tab, img + sizeof h, h.nsections * sizeof *tab);
  uint64_t lo[4] = {0}, len[4] = {0}, blob = 0;
  for (uint32_t i = 0; i < h.nsections; i++) {
    int k = tab[i].id == PLAN_SEC_AXES ? 0 : tab[i].id == PLAN_SEC_BUCKETS ? 1 : tab[i].id == PLAN_SEC_DIMUSE ? 2
          : tab[i].id == PLAN_SEC_BUCKET_PLANS ? 3 : -1;
    if (k >= 0) { lo[k] = tab[i].offset; len[k] = tab[i].size; }
    if (tab[i].id == PLAN_SEC_BUCKET_PLANS) blob = tab[i].offset;
  }
  uint64_t x = 88172645463325252ull;
  int accepted = 0, refused = 0, silent = 0;
  unsigned char *c = malloc(n);
  for (int it = 0; it < 300; it++) {
    memcpy(c, img, n);
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    int k = (int)(x % 4);
    if (!len[k]) continue;
    /* the image part: mostly the headers and tables at the start of a bucket's image */
    uint64_t span = k == 3 ? (len[k] < 8192 ? len[k] : 8192) : len[k];
    uint64_t at = lo[k] + (x >> 8) % span;
    if (k == 3 && q->nbuckets > 1) at = blob + q->buckets[(x >> 40) % (q->nbuckets - 1)].offset + (x >> 8) % 2048;
    c[at] ^= (unsigned char)(1u << ((x >> 20) % 8));
    if (k == 3 && (x >> 30) % 2) /* seal the bucket's own checksum too */
      for (uint32_t b = 0; b + 1 < q->nbuckets; b++)
        if (at >= blob + q->buckets[b].offset && at < blob + q->buckets[b].offset + q->buckets[b].bytes)
          fix_checksum(c + blob + q->buckets[b].offset, q->buckets[b].bytes);
    fix_checksum(c, n);
    spit(mutant, c, n);
    GpucErr e = {0};
    Plan *r = gpuc_plan_read(mutant, &e);
    if (r) accepted++;
    else { refused++; silent += e.msg[0] == 0; }
    gpuc_plan_free(r);
  }
  printf("bucket tables: %d accepted, %d refused\n", accepted, refused);
  CHECK(silent == 0, "%d refusals without a message", silent);
  CHECK(refused > 50, "most mutants of the bucket tables are refused (%d)", refused);
  free(c);
  free(img);
}

static Plan *mlp_buckets(const char *models, const char *work, Plan **single_out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/mlp.onnx", models);
  static const int64_t sizes[3][GPUC_PLAN_MAX_AXES] = {{1}, {16}, {64}};
  Plan *plans[3];
  SharedWeights w = {0};
  GpucErr e = {0};
  for (int i = 3; i-- > 0;) { /* largest first, as gpuc does */
    GpucShapeBind b = {.name = "image", .rank = 2, .dims = {sizes[i][0], 784}};
    plans[i] = compile_model(path, &b, 1, 90, false, NULL);
    if (!plans[i]) return NULL;
    if (i == 2) { /* the single-shape plan to compare with: batch 64 alone */
      char one[4096];
      snprintf(one, sizeof one, "%s/mlp_b64.gpuc", work);
      CHECK(gpuc_plan_write(plans[i], one, &e) == 0, "write %s: %s", one, e.msg);
      *single_out = gpuc_plan_read(one, &e);
    }
    CHECK(gpuc_shared_weights_add(&w, plans[i], &e) == 0, "shared weights: %s", e.msg);
  }
  CHECK(w.deduped_bytes * 3 >= w.added_bytes * 2 - 4096, "the buckets' weights were found stored (%llu of %llu bytes)",
        (unsigned long long)w.deduped_bytes, (unsigned long long)w.added_bytes);
  const char *use_names[2] = {"image", "logits"};
  PlanDimUse uses[2] = {{.dim = 0, .axis = 0, .is_output = 0}, {.dim = 0, .axis = 0, .is_output = 1}};
  BucketSpec spec = {.naxes = 1, .nbuckets = 3, .axis_name = {"batch"},
                     .axes = {{.flags = PLAN_AXIS_F_BATCH, .lo = 1, .hi = 64}}, .sizes = sizes,
                     .nuses = 2, .use_name = use_names, .uses = uses};
  Plan *c = NULL;
  CHECK(gpuc_plan_buckets_build(&w, plans, 3, &spec, &c, &e) == 0 && c, "build: %s", e.msg);
  gpuc_shared_weights_free(&w);
  return c;
}

static void test_plan_file(const char *models, const char *work) {
  Plan *single = NULL;
  Plan *c = mlp_buckets(models, work, &single);
  if (!c || !single) { gpuc_plan_free(c); gpuc_plan_free(single); CHECK(0, "mlp bucket plan"); return; }
  char a[4096], b[4096], one[4096], bad[4096];
  snprintf(a, sizeof a, "%s/mlp_buckets.gpuc", work);
  snprintf(b, sizeof b, "%s/mlp_buckets2.gpuc", work);
  snprintf(one, sizeof one, "%s/mlp_b64.gpuc", work);
  snprintf(bad, sizeof bad, "%s/mlp_bad.gpuc", work);
  Plan *q = plan_round_trip(c, a, b, "bucket");
  gpuc_plan_free(c);
  if (!q) { gpuc_plan_free(single); return; }
  long fa = file_size(a), f1 = file_size(one);
  printf("mlp: bucket plan (1, 16, 64) %ld bytes, batch-64 plan %ld bytes (%.2fx); weights %llu vs %llu bytes\n", fa,
         f1, (double)fa / (double)f1, (unsigned long long)q->weights_size, (unsigned long long)single->weights_size);
  CHECK(fa > 0 && f1 > 0 && (double)fa < 1.3 * (double)f1, "the bucket plan is under 1.3x the one-shape plan (%ld vs %ld)",
        fa, f1);
  CHECK(q->weights_size == single->weights_size, "weights stored once: %llu bytes as the one-shape plan's %llu",
        (unsigned long long)q->weights_size, (unsigned long long)single->weights_size);
  CHECK(q->nbuckets == 3 && q->naxes == 1 && q->ndimuse == 2 && q->buckets[0].size[0] == 1 &&
        q->buckets[1].size[0] == 16 && q->buckets[2].size[0] == 64, "the bucket table reads back");
  uint64_t arena = 0;
  for (uint32_t i = 0; i < q->nbuckets; i++) {
    const Plan *bp = gpuc_plan_bucket(q, i);
    CHECK(bp->weights == q->weights && bp->weights_size == q->weights_size, "bucket %u reads the one weights blob", i);
    CHECK((bp == q) == (i == 2), "the container is the last bucket");
    bool in = true;
    for (uint32_t t = 0; t < bp->ntensors; t++)
      if (bp->tensors[t].mem == PLAN_MEM_WEIGHTS) in = in && bp->tensors[t].offset + bp->tensors[t].bytes <= q->weights_size;
    CHECK(in, "bucket %u's weights lie in the shared blob", i);
    if (bp->meta.arena_bytes > arena) arena = bp->meta.arena_bytes;
    int64_t dims[GPUC_MAX_RANK];
    CHECK(gpuc_bucket_io_dims(q, "image", false, q->buckets[i].size, dims) == 2 && dims[0] == q->buckets[i].size[0] &&
          dims[1] == 784, "bucket %u's input shape", i);
  }
  CHECK(gpuc_bucket_arena_bytes(q) == arena && arena == q->meta.arena_bytes,
        "one arena, the largest bucket's (%llu bytes)", (unsigned long long)arena);
  CHECK(gpuc_plan_bucket(q, 0)->meta.arena_bytes < arena, "a smaller bucket needs a smaller arena");
  char *txt = NULL;
  size_t tl = 0;
  FILE *mf = open_memstream(&txt, &tl);
  gpuc_plan_print(q, a, mf);
  fclose(mf);
  CHECK(txt && strstr(txt, "buckets: 3") && strstr(txt, "axis 0 'batch': 1..64") && strstr(txt, "bucket  1 16"),
        "inspect lists the buckets");
  free(txt);
  /* the reader's table checks: patch a table (the checksum fixed), refused */
  size_t n = 0;
  unsigned char *img = slurp(a, &n);
  GpucErr e = {0};
  if (img) {
    unsigned char *cp = malloc(n);
    PlanHeader h;
    PlanSection tab[64];
    memcpy(&h, img, sizeof h);
    memcpy(tab, img + sizeof h, h.nsections * sizeof *tab);
    for (uint32_t i = 0; i < h.nsections; i++) {
      if (tab[i].id == PLAN_SEC_DIMUSE) { /* logits dim 0 -> dim 1 (10 in every bucket, not the batch) */
        memcpy(cp, img, n);
        cp[tab[i].offset + sizeof(PlanDimUse) + 4] = 1;
        fix_checksum(cp, n);
        spit(bad, cp, n);
        expect_refused(bad, "corrupt plan", "a dim use naming a fixed dim");
      }
      if (tab[i].id == PLAN_SEC_BUCKETS) { /* bucket 1 at batch 17: its plan is at 16 */
        memcpy(cp, img, n);
        int64_t v = 17;
        memcpy(cp + tab[i].offset + sizeof(PlanBucket), &v, 8);
        fix_checksum(cp, n);
        spit(bad, cp, n);
        expect_refused(bad, "corrupt plan", "a bucket whose plan has another shape");
        memcpy(cp, img, n); /* bucket 1's image over bucket 0's */
        uint64_t off0;
        memcpy(&off0, cp + tab[i].offset + offsetof(PlanBucket, offset), 8);
        memcpy(cp + tab[i].offset + sizeof(PlanBucket) + offsetof(PlanBucket, offset), &off0, 8);
        fix_checksum(cp, n);
        spit(bad, cp, n);
        expect_refused(bad, "over another's", "two buckets on one image");
        memcpy(cp, img, n);
        v = 65;
        memcpy(cp + tab[i].offset + sizeof(PlanBucket), &v, 8);
        fix_checksum(cp, n);
        spit(bad, cp, n);
        expect_refused(bad, "size on axis", "a bucket outside the range");
      }
      if (tab[i].id == PLAN_SEC_AXES) { /* lo > hi */
        memcpy(cp, img, n);
        int64_t v = 100;
        memcpy(cp + tab[i].offset + 8, &v, 8);
        fix_checksum(cp, n);
        spit(bad, cp, n);
        expect_refused(bad, "axis 0", "an axis with lo > hi");
      }
    }
    { /* a format 4 plan (before buckets) reads as the one-shape plan it is */
      size_t n1 = 0;
      unsigned char *one_img = slurp(one, &n1);
      if (one_img) {
        memcpy(&h, one_img, sizeof h);
        h.format_version = 4;
        memcpy(one_img, &h, sizeof h);
        for (uint32_t i = 0; i < h.nsections; i++) { /* format 4's GEMM records: without sparse_cfg */
          PlanSection sec;
          memcpy(&sec, one_img + sizeof h + i * sizeof sec, sizeof sec);
          if (sec.id != PLAN_SEC_GEMMS) continue;
          uint64_t ng = sec.size / sizeof(PlanGemm);
          for (uint64_t k = 0; k < ng; k++)
            memmove(one_img + sec.offset + k * PLAN_GEMM_V5_SIZE, one_img + sec.offset + k * sizeof(PlanGemm),
                    PLAN_GEMM_V5_SIZE);
          memset(one_img + sec.offset + ng * PLAN_GEMM_V5_SIZE, 0, sec.size - ng * PLAN_GEMM_V5_SIZE);
          sec.size = ng * PLAN_GEMM_V5_SIZE;
          memcpy(one_img + sizeof h + i * sizeof sec, &sec, sizeof sec);
        }
        fix_checksum(one_img, n1);
        spit(bad, one_img, n1);
        GpucErr e4 = {0};
        Plan *r4 = gpuc_plan_read(bad, &e4);
        CHECK(r4 && r4->nbuckets == 0 && r4->hdr.format_version == 4 && gpuc_plan_bucket(r4, 0) == r4,
              "a format 4 plan reads as a one-shape plan: %s", e4.msg);
        gpuc_plan_free(r4);
        free(one_img);
      }
    }
    memcpy(cp, img, n); /* a newer format: the version is checked before anything else */
    memcpy(&h, cp, sizeof h);
    h.format_version = GPUC_PLAN_FORMAT_VERSION + 1;
    memcpy(cp, &h, sizeof h);
    spit(bad, cp, n);
    expect_refused(bad, "this gpuc reads versions 2 to 7", "a newer plan format");
    free(cp);
    free(img);
  }
  /* a bucket's image on its own is not a plan */
  const PlanBucket *b0 = &q->buckets[0];
  img = slurp(a, &n);
  if (img) {
    PlanHeader h;
    PlanSection tab[64];
    memcpy(&h, img, sizeof h);
    memcpy(tab, img + sizeof h, h.nsections * sizeof *tab);
    for (uint32_t i = 0; i < h.nsections; i++)
      if (tab[i].id == PLAN_SEC_BUCKET_PLANS && b0->bytes && tab[i].offset + b0->offset + b0->bytes <= n) {
        spit(bad, img + tab[i].offset + b0->offset, b0->bytes); /* (the table read back holds the file's places) */
        expect_refused(bad, "a bucket's plan on its own", "a bucket's image alone");
      }
    free(img);
  }
  (void)e;
  fuzz_tables(a, bad, q);
  gpuc_plan_free(q);
  gpuc_plan_free(single);
}

/* ---- the shared weights blob: equal bytes, and leading bytes, stored once ---- */

/* A plan of one weight tensor: `rows` copies of one 96-float row, then
 * (other) a row of its own. */
static Plan *weight_plan(int rows, bool other) {
  Plan *p = calloc(1, sizeof *p);
  int n = rows + (other ? 1 : 0);
  p->ntensors = 1;
  p->tensors = calloc(1, sizeof *p->tensors);
  p->tensors[0] = (PlanTensor){.dt = GPUC_DT_F32, .rank = 2, .mem = PLAN_MEM_WEIGHTS, .role = PLAN_ROLE_CONST,
                               .dims = {n, 96}, .offset = 0, .bytes = (uint64_t)n * 96 * 4};
  p->weights_size = p->tensors[0].bytes;
  p->weights = malloc(p->weights_size);
  float *w = (float *)p->weights;
  for (int r = 0; r < n; r++)
    for (int c = 0; c < 96; c++) w[r * 96 + c] = r == rows ? -1.0f - (float)c : 0.5f * (float)c;
  return p;
}

static void test_shared_weights(void) {
  SharedWeights w = {0};
  GpucErr e = {0};
  Plan *big = weight_plan(8, false), *small = weight_plan(3, false), *same = weight_plan(8, false),
       *diff = weight_plan(3, true);
  CHECK(gpuc_shared_weights_add(&w, big, &e) == 0 && w.size == 8 * 96 * 4, "the largest bucket's weight is stored");
  CHECK(gpuc_shared_weights_add(&w, same, &e) == 0 && w.size == 8 * 96 * 4 && same->tensors[0].offset == 0,
        "an equal weight takes its offset");
  CHECK(gpuc_shared_weights_add(&w, small, &e) == 0 && w.size == 8 * 96 * 4 && small->tensors[0].offset == 0,
        "a weight equal to the leading bytes of a stored one (a broadcast row at a smaller shape) takes its offset");
  CHECK(gpuc_shared_weights_add(&w, diff, &e) == 0 && diff->tensors[0].offset >= 8 * 96 * 4 &&
        diff->tensors[0].offset % GPUC_PLAN_ALIGN == 0 && w.size == diff->tensors[0].offset + 4 * 96 * 4,
        "a weight that differs is appended, aligned");
  CHECK(w.added_bytes == (8 + 8 + 3 + 4) * 96 * 4 && w.deduped_bytes == (8 + 3) * 96 * 4,
        "bytes added %llu, found stored %llu", (unsigned long long)w.added_bytes, (unsigned long long)w.deduped_bytes);
  CHECK(big->weights == NULL && big->weights_size == 0, "a plan keeps no weights of its own once added");
  const float *blob = (const float *)w.data;
  CHECK(blob[96 + 5] == 2.5f && ((const float *)(w.data + diff->tensors[0].offset))[3 * 96 + 2] == -3.0f,
        "the blob holds the bytes");
  gpuc_plan_free(big); gpuc_plan_free(small); gpuc_plan_free(same); gpuc_plan_free(diff);
  gpuc_shared_weights_free(&w);
}

/* ---- the CPU reference: a padded run, sliced, equals the unpadded run ---- */

static Tensor *run_ref(const char *path, const GpucShapeBind *b, int nb, const Tensor *const *ins, int nout_want) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return NULL;
  Tensor *outs[8] = {0};
  int rc = gpuc_ref_run(g, ins, outs, &e);
  CHECK(rc == 0, "reference run of %s: %s", path, e.msg);
  for (int k = 1; k < g->noutputs && k < 8; k++) gpuc_tensor_free(outs[k]);
  gpuc_graph_free(g);
  (void)nout_want;
  return rc ? NULL : outs[0];
}

static double rel_l2_t(const Tensor *a, const Tensor *b) {
  if (!a || !b || gpuc_numel(a) != gpuc_numel(b)) return INFINITY;
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpuc_numel(a); i++) {
    double x = gpuc_get_f64(a, i), y = gpuc_get_f64(b, i);
    if (isnan(x) || isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static void test_reference_mlp(const char *models) {
  char path[4096];
  snprintf(path, sizeof path, "%s/mlp.onnx", models);
  /* the tables of a batch plan 1..64 in buckets 1, 16, 64 (only the tables matter here) */
  Plan *p = calloc(1, sizeof *p);
  static char str[] = "image\0logits\0batch";
  p->strings = malloc(sizeof str);
  memcpy(p->strings, str, sizeof str);
  p->strings_size = sizeof str;
  p->ntensors = 2;
  p->tensors = calloc(2, sizeof *p->tensors);
  p->tensors[0] = (PlanTensor){.name = 0, .dt = GPUC_DT_F32, .rank = 2, .role = PLAN_ROLE_INPUT, .dims = {64, 784}};
  p->tensors[1] = (PlanTensor){.name = 6, .dt = GPUC_DT_F32, .rank = 2, .role = PLAN_ROLE_OUTPUT, .dims = {64, 10}};
  p->naxes = 1;
  p->axes = calloc(1, sizeof *p->axes);
  p->axes[0] = (PlanAxis){.name = 13, .flags = PLAN_AXIS_F_BATCH, .lo = 1, .hi = 64};
  p->nbuckets = 3;
  p->buckets = calloc(3, sizeof *p->buckets);
  p->buckets[0].size[0] = 1; p->buckets[1].size[0] = 16; p->buckets[2].size[0] = 64;
  p->ndimuse = 2;
  p->dimuse = calloc(2, sizeof *p->dimuse);
  p->dimuse[0] = (PlanDimUse){.name = 0, .dim = 0, .axis = 0};
  p->dimuse[1] = (PlanDimUse){.name = 6, .dim = 0, .axis = 0, .is_output = 1};
  GpucErr e = {0};
  int64_t dims[2] = {5, 784};
  Tensor *x = gpuc_tensor_new(GPUC_DT_F32, 2, dims, &e);
  for (int64_t i = 0; i < 5 * 784; i++) ((float *)x->data)[i] = (float)urand();
  const char *names[1] = {"image"};
  const Tensor *ins[1] = {x};
  int64_t actual[GPUC_PLAN_MAX_AXES];
  int k = gpuc_bucket_actual(p, 1, names, ins, actual, &e) ? -1 : gpuc_bucket_select(p, actual, &e);
  CHECK(k == 1 && actual[0] == 5, "batch 5 runs in the 16 bucket: %s", e.msg);
  if (k == 1) {
    Tensor *xp = gpuc_bucket_pad(p, "image", x, p->buckets[k].size, &e);
    GpucShapeBind b16 = {.name = "image", .rank = 2, .dims = {16, 784}}, b5 = {.name = "image", .rank = 2, .dims = {5, 784}};
    const Tensor *pin[1] = {xp};
    Tensor *yp = xp ? run_ref(path, &b16, 1, pin, 1) : NULL;
    Tensor *y = run_ref(path, &b5, 1, ins, 1);
    Tensor *ys = yp ? gpuc_bucket_slice(p, "logits", yp, actual, &e) : NULL;
    double r = rel_l2_t(ys, y);
    CHECK(ys && ys->dims[0] == 5 && ys->dims[1] == 10 && r <= 1e-6,
          "mlp batch 5 padded to 16 and sliced = batch 5 (fp32 rel L2 %.3g <= 1e-6)", r);
    gpuc_tensor_free(xp); gpuc_tensor_free(yp); gpuc_tensor_free(y); gpuc_tensor_free(ys);
  }
  gpuc_tensor_free(x);
  gpuc_plan_free(p);
}

static void test_reference_bert(const char *zoo) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tiny_bert_ts.onnx", zoo);
  Plan *p = synth_plan(PLAN_AXIS_F_MASKED); /* input_ids, attention_mask [batch, seq], output [b, s, 32] */
  GpucErr e = {0};
  Tensor *ids = i64_tensor(3, 5, 0), *mask = i64_tensor(3, 5, 0);
  for (int i = 0; i < 15; i++) {
    ((int64_t *)ids->data)[i] = 1 + (i * 37) % 99;       /* tokens of a vocabulary of 100 */
    ((int64_t *)mask->data)[i] = (i % 5 == 4 && i / 5 == 1) ? 0 : 1; /* row 1 ends in its own padding */
  }
  const char *names[2] = {"input_ids", "attention_mask"};
  const Tensor *ins[2] = {ids, mask};
  int64_t actual[GPUC_PLAN_MAX_AXES];
  int k = gpuc_bucket_actual(p, 2, names, ins, actual, &e) ? -1 : gpuc_bucket_select(p, actual, &e);
  CHECK(k == 7, "tiny_bert 3x5 runs in the 4x8 bucket: %s", e.msg);
  if (k == 7) {
    Tensor *pi = gpuc_bucket_pad(p, "input_ids", ids, p->buckets[k].size, &e);
    Tensor *pm = gpuc_bucket_pad(p, "attention_mask", mask, p->buckets[k].size, &e);
    CHECK(pm && ((int64_t *)pm->data)[5] == 0 && ((int64_t *)pm->data)[7] == 0 && ((int64_t *)pm->data)[0] == 1,
          "the mask is 0 over the padded positions");
    GpucShapeBind b48[2] = {{.name = "input_ids", .rank = 2, .dims = {4, 8}},
                            {.name = "attention_mask", .rank = 2, .dims = {4, 8}}};
    GpucShapeBind b35[2] = {{.name = "input_ids", .rank = 2, .dims = {3, 5}},
                            {.name = "attention_mask", .rank = 2, .dims = {3, 5}}};
    const Tensor *pin[2] = {pi, pm};
    Tensor *yp = pi && pm ? run_ref(path, b48, 2, pin, 1) : NULL;
    Tensor *y = run_ref(path, b35, 2, ins, 1);
    Tensor *ys = yp ? gpuc_bucket_slice(p, "output", yp, actual, &e) : NULL;
    double r = rel_l2_t(ys, y);
    CHECK(ys && ys->dims[0] == 3 && ys->dims[1] == 5 && ys->dims[2] == 32 && r <= 1e-6,
          "tiny_bert 3x5 padded to 4x8 under the mask and sliced = the 3x5 run (fp32 rel L2 %.3g <= 1e-6)", r);
    gpuc_tensor_free(pi); gpuc_tensor_free(pm); gpuc_tensor_free(yp); gpuc_tensor_free(y); gpuc_tensor_free(ys);
  }
  gpuc_tensor_free(ids);
  gpuc_tensor_free(mask);
  gpuc_plan_free(p);
}

/* ---- the corner walk (gpuc_bucket_copies) on random shapes, against the
 * element-wise rule: dst[i] = src[i] where i is inside src, else (a
 * repeat dim past src's end) src's last index there, else 0 ---- */
typedef struct WalkMem { uint8_t *dst; const uint8_t *src; int copies; } WalkMem;

static int walk_exec(void *ctx, const GpucBucketCopy *c) { /* the test's own executor: rows of memcpy/memset */
  WalkMem *m = ctx;
  m->copies++;
  for (uint64_t r = 0; r < c->rows; r++) {
    uint8_t *to = m->dst + c->dst_off + r * c->dst_pitch;
    if (c->kind == GPUC_BUCKET_ZERO) memset(to, 0, c->width);
    else memmove(to, (c->kind == GPUC_BUCKET_FROM_DST ? m->dst : m->src) + c->src_off + r * c->src_pitch, c->width);
  }
  return 0;
}

static int walk_case(int rank, const int64_t *sd, const int64_t *dd, const bool *rep, size_t es) {
  int64_t ns = 1, nd = 1;
  for (int d = 0; d < rank; d++) { ns *= sd[d]; nd *= dd[d]; }
  uint8_t *src = malloc((size_t)ns * es + 1), *dst = malloc((size_t)nd * es + 1);
  for (int64_t i = 0; i < ns * (int64_t)es; i++) src[i] = (uint8_t)(1 + (i * 7 + 3) % 251);
  memset(dst, 0xAB, (size_t)nd * es + 1);
  WalkMem m = {dst, src, 0};
  gpuc_bucket_copies(rank, sd, dd, rep, es, walk_exec, &m);
  int bad = dst[nd * (int64_t)es] != 0xAB; /* nothing written past the end */
  for (int64_t i = 0; i < nd && !bad; i++) {
    int64_t r = i, at = 0, stride = 1;
    bool zero = false;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t k = r % dd[d];
      r /= dd[d];
      if (k >= sd[d]) {
        if (rep[d] && sd[d] > 0) k = sd[d] - 1;
        else zero = true;
      }
      at += k * stride;
      stride *= sd[d];
    }
    for (size_t b = 0; b < es && !bad; b++) bad = dst[i * (int64_t)es + (int64_t)b] != (zero ? 0 : src[at * (int64_t)es + (int64_t)b]);
  }
  free(src);
  free(dst);
  return bad ? -1 : m.copies;
}

static void test_copies(void) {
  uint64_t seed = 12345;
  int fails = 0, cases = 0;
  for (int t = 0; t < 3000; t++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = seed >> 11;
    int rank = (int)(r % 5); /* 0..4 */
    int64_t sd[GPUC_MAX_RANK], dd[GPUC_MAX_RANK];
    bool rep[GPUC_MAX_RANK];
    for (int d = 0; d < rank; d++) {
      r = r * 2862933555777941757ull + 3037000493ull;
      sd[d] = (int64_t)((r >> 20) % 5);     /* 0..4 */
      dd[d] = (int64_t)((r >> 30) % 5);
      rep[d] = (r >> 40) & 1;
    }
    size_t es = (size_t[]){1, 2, 4, 8}[(r >> 50) % 4];
    cases++;
    if (walk_case(rank, sd, dd, rep, es) < 0) {
      if (fails++ < 3) {
        printf("walk rank %d es %zu:", rank, es);
        for (int d = 0; d < rank; d++) printf(" %lld->%lld%s", (long long)sd[d], (long long)dd[d], rep[d] ? "r" : "");
        printf("\n");
      }
    }
  }
  CHECK(fails == 0, "the corner walk: %d of %d random pads/slices differ from the element-wise rule", fails, cases);
  /* mlp's batch 5 padded to 64 (rows repeated): one copy, then 5 doublings of the repeated run */
  int64_t s5[2] = {5, 784}, d64[2] = {64, 784};
  bool rb[2] = {true, false};
  CHECK(walk_case(2, s5, d64, rb, 4) == 7, "batch 5 -> 64: 7 copies (got %d)", walk_case(2, s5, d64, rb, 4));
  /* BERT's 3x5 ids into a 4x8 bucket: one 2-D copy, one 2-D zero fill, the batch's repeat */
  int64_t s35[2] = {3, 5}, d48[2] = {4, 8};
  bool rs[2] = {true, false};
  CHECK(walk_case(2, s35, d48, rs, 8) == 3, "3x5 -> 4x8: 3 copies (got %d)", walk_case(2, s35, d48, rs, 8));
  /* a [4,16,32] output sliced to [3,5,32]: one 2-D copy */
  int64_t so[3] = {4, 16, 32}, dso[3] = {3, 5, 32};
  bool rn[3] = {true, false, false};
  CHECK(walk_case(3, so, dso, rn, 4) == 1, "[4x16x32] -> [3x5x32]: one 2-D copy");
}

/* ---- the default of 1 for symbolic dims no --shape binds (ir/default_dims.c) ---- */
static void test_default_dims(const char *zoo) {
  char path[4096], note[1024];
  snprintf(path, sizeof path, "%s/tiny_bert_ts.onnx", zoo);
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(path, NULL, 0, &e);
  CHECK(g != NULL, "load %s: %s", path, e.msg);
  if (!g) return;
  int n = gpuc_graph_default_dims(g, note, sizeof note);
  CHECK(n == 4, "four symbolic dims defaulted (%d)", n);
  CHECK(strstr(note, "input 'input_ids': symbolic dims batch, seq set to 1") &&
        strstr(note, "--shape attention_mask=DIMS"), "the note names the dims and the flag: %s", note);
  bool ones = true;
  for (int k = 0; k < g->ninputs; k++)
    for (int d = 0; d < g->values[g->inputs[k]].t.rank; d++) ones = ones && g->values[g->inputs[k]].t.dims[d] == 1;
  CHECK(ones, "every input dim is 1");
  CHECK(gpuc_graph_infer(g, &e) == 0, "the graph infers at 1x1 (its shape chains fold in the passes): %s", e.msg);
  CHECK(gpuc_graph_default_dims(g, note, sizeof note) == 0 && note[0] == 0, "nothing left to default, no note");
  gpuc_graph_free(g);
  GpucShapeBind b = {.name = "input_ids", .rank = 2, .dims = {3, 5}};
  g = gpuc_onnx_load(path, &b, 1, &e);
  CHECK(g && gpuc_graph_default_dims(g, note, sizeof note) == 0, "a --shape binds the shared dims: none defaulted");
  gpuc_graph_free(g);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: test_buckets MODELS_DIR ZOO_DIR WORK_DIR\n"); return 2; }
  test_selection();
  test_pad_slice();
  test_copies();
  test_shared_weights();
  test_default_dims(argv[2]);
  test_reference_mlp(argv[1]);
  test_reference_bert(argv[2]);
  test_plan_file(argv[1], argv[3]);
  return check_summary();
}
