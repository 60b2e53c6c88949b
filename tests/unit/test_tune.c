/* Block-size-free kernels (PLAN_TUNE_F_BLOCK_FREE), without a GPU:
 *   1. the source rule (cg_items_kernel_check) on hand-written kernels:
 *      what it accepts, what it refuses and why, the name-free hash;
 *   2. the bundled models compiled (fp32 and fp16): every free step is a
 *      1-D launch whose grid is the one its items need, and its kernel's
 *      PTX, as NVRTC compiled it, has no shared memory, barrier, warp
 *      shuffle or atomic (a check independent of the source rule); the
 *      step kinds that must be free are, and those that cooperate inside
 *      a block (Softmax, LayerNorm, Attention, block pools, tiled
 *      Transposes) are not.
 * usage: test_tune MODELS_DIR */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "check.h"
#include "compile_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- 1. the source rule ---- */
static const char *check_src(const char *src, const char *name, uint64_t *hash) {
  return cg_items_kernel_check(src, 0, name, hash);
}

static void expect_accepted(const char *src, const char *name, const char *what) {
  uint64_t h = 0;
  const char *why = check_src(src, name, &h);
  CHECK(why == NULL, "%s: refused (%s)", what, why ? why : "");
  CHECK(h != 0, "%s: no hash", what);
}

static void expect_refused_src(const char *src, const char *name, const char *want, const char *what) {
  uint64_t h = 1;
  const char *why = check_src(src, name, &h);
  CHECK(why != NULL && strstr(why, want), "%s: got '%s', want '%s'", what, why ? why : "(accepted)", want);
  CHECK(h == 0, "%s: a refused kernel has a hash", what);
}

#define K(name, body) "extern \"C\" __global__ void " name "(const float* __restrict__ x, float* __restrict__ y) {\n" body "}\n"

static void check_rule(void) {
  expect_accepted(K("k1_Relu", "  GRID_STRIDE(i, 1024LL) y[i] = x[i] > 0 ? x[i] : 0;\n"), "k1_Relu", "plain loop");
  expect_accepted(K("k2_Range", "  const double sv = (double)x[0], dv = 2.0;\n  const i64 n = 5;\n"
                                "  GRID_STRIDE(i, 8LL) y[i] = (float)(sv + (double)i * dv + n);\n"),
                  "k2_Range", "const declarations before the loop");
  /* the kernel is found by its exact name: k3_Add's text is not k3_Add_2's */
  const char *two = K("k3_Add", "  float acc = 0;\n  GRID_STRIDE(i, 4LL) { acc += x[i]; y[i] = acc; }\n")
                    K("k3_Add_2", "  GRID_STRIDE(i, 4LL) y[i] = x[i] + 1.0f;\n");
  expect_accepted(two, "k3_Add_2", "the second kernel of a node, by its exact name");
  expect_refused_src(two, "k3_Add", "before its GRID_STRIDE loop", "state carried across iterations");
  expect_refused_src(K("k4", "  const float* p = x;\n  GRID_STRIDE(i, 4LL) { y[i] = *p; p++; }\n"), "k4",
                     "not a constant", "a pointer declared before the loop");
  expect_refused_src(K("k5", "  GRID_STRIDE(i, 4LL) y[i] = x[i];\n  GRID_STRIDE(j, 4LL) y[j] += 1;\n"), "k5",
                     "more than one", "two loops");
  expect_refused_src(K("k6", "  GRID_STRIDE(i, 4LL) { __shared__ float s[32]; s[0] = x[i]; y[i] = s[0]; }\n"),
                     "k6", "__shared__", "shared memory");
  expect_refused_src(K("k7", "  GRID_STRIDE(i, 4LL) y[i] = x[i] * blockDim.x;\n"), "k7", "blockDim",
                     "the block size in the math");
  expect_refused_src(K("k8", "  GRID_STRIDE(i, 4LL) atomicAdd(y, x[i]);\n"), "k8", "atomic", "an atomic");
  expect_refused_src(K("k9", "  GRID_STRIDE(i, 4LL) y[i] = __shfl_xor_sync(0xffffffffu, x[i], 1);\n"), "k9",
                     "__shfl", "a warp shuffle");
  expect_refused_src(K("k10", "  for (i64 r = blockIdx.x; r < 4; r += gridDim.x) y[r] = x[r];\n"), "k10",
                     "before its GRID_STRIDE loop", "a block-per-row loop");
  expect_refused_src(K("k11", "  GRID_STRIDE(i, 4LL) y[i] = x[i];\n"), "k12", "not in the module source",
                     "a name that is not there");
  /* the hash leaves the name out and sees everything else */
  uint64_t ha = 0, hb = 0, hc = 0;
  check_src(K("k20_Add", "  GRID_STRIDE(i, 64LL) y[i] = x[i] + 1.0f;\n"), "k20_Add", &ha);
  check_src(K("k7_Fused2", "  GRID_STRIDE(i, 64LL) y[i] = x[i] + 1.0f;\n"), "k7_Fused2", &hb);
  check_src(K("k20_Add", "  GRID_STRIDE(i, 64LL) y[i] = x[i] + 2.0f;\n"), "k20_Add", &hc);
  CHECK(ha && ha == hb, "the same kernel under two names hashes alike");
  CHECK(hc && hc != ha, "another body hashes differently");
}

/* ---- 2. the bundled models ---- */
/* The text of `.entry name(` in the PTX, to the next entry. */
static const char *ptx_entry(const char *ptx, const char *name, size_t *len) {
  char head[200];
  snprintf(head, sizeof head, ".entry %s(", name);
  const char *s = strstr(ptx, head);
  if (!s) return NULL;
  const char *end = strstr(s + 1, ".entry ");
  *len = end ? (size_t)(end - s) : strlen(s);
  return s;
}

static bool has(const char *s, size_t n, const char *what) {
  size_t w = strlen(what);
  for (size_t i = 0; i + w <= n; i++)
    if (!memcmp(s + i, what, w)) return true;
  return false;
}

/* The op a kernel was emitted for: "k12_Softmax_2" -> "Softmax". */
static void kernel_op(const char *kname, char *op, size_t n) {
  const char *u = strchr(kname, '_');
  snprintf(op, n, "%s", u ? u + 1 : kname);
  char *v = strchr(op, '_');
  if (v) *v = 0;
}

typedef struct Model {
  const char *file;
  const char *shapes[4];
  bool fp16;
  const char *free_ops;          /* ops whose every kernel must be free ("," separated) */
  const char *fixed_ops;         /* ops none of whose kernels may be */
  int min_free;
} Model;

static bool in_list(const char *list, const char *op) {
  char buf[256];
  snprintf(buf, sizeof buf, ",%s,", list);
  char want[80];
  snprintf(want, sizeof want, ",%s,", op);
  return strstr(buf, want) != NULL;
}

/* "name=2x3x4" -> a bind (name points into a static copy) */
static void parse_bind(const char *s, GpucShapeBind *b) {
  static char names[16][64];
  static int used;
  char *n = names[used++ % 16];
  snprintf(n, 64, "%s", s);
  char *eq = strchr(n, '=');
  memset(b, 0, sizeof *b);
  b->name = n;
  if (!eq) return;
  *eq = 0;
  for (char *q = eq + 1; *q && b->rank < GPUC_MAX_RANK; q += *q == 'x') b->dims[b->rank++] = strtoll(q, &q, 10);
}

static void check_model(const char *dir, const Model *m) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, m->file);
  GpucShapeBind binds[4];
  int nb = 0;
  for (; nb < 4 && m->shapes[nb]; nb++) parse_bind(m->shapes[nb], &binds[nb]);
  Plan *p = compile_model(path, binds, nb, 90, m->fp16, NULL);
  if (!p) return;
  int nfree = 0;
  CHECK(p->ntune == p->nsteps, "%s: %u tune records for %u steps", m->file, p->ntune, p->nsteps);
  for (uint32_t i = 0; i < p->nsteps && i < p->ntune; i++) {
    const PlanStep *s = &p->steps[i];
    const PlanTune *t = &p->tune[i];
    if (s->kind != PLAN_STEP_KERNEL) {
      CHECK(t->flags == 0 && t->items == 0 && t->src_hash == 0, "%s step %u: a library call with a tune record",
            m->file, i);
      continue;
    }
    const char *kname = gpuc_plan_str(p, p->kernels[s->index].name);
    char op[64];
    kernel_op(kname, op, sizeof op);
    bool fr = (t->flags & PLAN_TUNE_F_BLOCK_FREE) != 0;
    if (in_list(m->free_ops, op)) CHECK(fr, "%s: %s (%s) should be block-size free", m->file, kname, op);
    if (in_list(m->fixed_ops, op)) CHECK(!fr, "%s: %s (%s) must not be block-size free", m->file, kname, op);
    if (!fr) continue;
    nfree++;
    CHECK(!(t->flags & PLAN_TUNE_F_BLOCK_TUNED), "%s: %s tuned at compile time", m->file, kname);
    CHECK(s->block[0] == GPUC_ITEMS_BLOCK && s->block[1] == 1 && s->block[2] == 1 && s->grid[1] == 1 &&
              s->grid[2] == 1 && s->shmem == 0 && s->grid[0] == gpuc_plan_items_grid(t->items, s->block[0]),
          "%s: %s is free but launched as grid %u block %u for %llu items", m->file, kname, s->grid[0],
          s->block[0], (unsigned long long)t->items);
    size_t len = 0;
    const char *body = ptx_entry(p->ptx, kname, &len);
    CHECK(body != NULL, "%s: no PTX entry for %s", m->file, kname);
    if (!body) continue;
    static const char *const coop[] = {".shared", "bar.sync", "barrier", "shfl.", "atom.", "red.", "vote."};
    for (size_t k = 0; k < sizeof coop / sizeof *coop; k++)
      CHECK(!has(body, len, coop[k]), "%s: free kernel %s has %s in its PTX", m->file, kname, coop[k]);
  }
  CHECK(nfree >= m->min_free, "%s: %d block-size-free kernels, want at least %d", m->file, nfree, m->min_free);
  gpuc_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_tune MODELS_DIR\n"); return 2; }
  check_rule();
  const Model models[] = {
    {"mlp.onnx", {"image=16x784"}, false, "Relu,Fused1,Fused2", "", 1},
    {"small_cnn.onnx", {0}, false, "Relu,MaxPool,Flatten,Reshape", "", 1},
    /* --fp16: the pool runs NHWC (codegen/lower_se.c), two items kernels */
    {"small_bn_cnn.onnx", {"image=4x1x28x28"}, true, "Cast,GlobalAveragePool", "", 1},
    {"resnet50.onnx", {"input=2x3x224x224"}, true, "Cast,GlobalAveragePool", "", 2},
    {"mobile_block.onnx", {0}, true, "Cast", "", 4},
    {"ffn_block.onnx", {"x=8x16x64"}, false, "", "Softmax,LogSoftmax,AddLayerNormalization", 2},
    {"add_layernorm.onnx", {0}, false, "", "AddLayerNormalization", 0},
    {"attention_bert.onnx", {"q=2x12x128x64", "k=2x12x128x64", "v=2x12x128x64", "mask=2x1x1x128"}, true, "Cast",
     "Attention", 2},
    {"attention.onnx", {"x=2x33x64", "mem=2x20x64", "mask=2x1x1x33"}, false, "", "Attention", 1},
  };
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) check_model(argv[1], &models[k]);
  return check_summary();
}
