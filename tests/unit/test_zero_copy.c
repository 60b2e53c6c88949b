/* Zero-copy device bindings without a GPU (runtime/zero_copy.h):
 *   - the plan rules on the bundled models' -O2 plans (sm_90): which
 *     inputs and outputs a device buffer may replace, printed as a table,
 *     and, from the plan's own lifetimes worked out here again, that an
 *     in-place input's bytes are shared with no tensor outside its group
 *     and an in-place output's with none live after it is first written
 *     (so the arena run and the in-place run compute the same bytes);
 *   - each static rule on small hand-made plans (a folded constant
 *     output, a GEMM bias row or 2:4 operand whose address cuBLASLt or
 *     cuSPARSELt took at load, a view larger than its tensor, an input a
 *     GEMM writes);
 *   - the per-run choice (gpuc_zc_choose): alignment, host bindings, the
 *     session's own memory, overlaps, an input that is also an output,
 *     and the address history that decides when a new address set is
 *     captured (first binding, a stable loop, two buffers alternating,
 *     a new buffer every run).
 * usage: test_zero_copy MODELS_DIR */
#include "check.h"
#include "compile_model.h"
#include "zero_copy.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the bundled models ------------------------------------------------- */
static void lifetimes(const Plan *p, int64_t *first, int64_t *last) {
  for (uint32_t t = 0; t < p->ntensors; t++) { first[t] = INT64_MAX; last[t] = -1; }
  for (uint32_t s = 0; s < p->nsteps; s++)
    for (uint32_t a = 0; a < p->steps[s].nargs; a++) {
      uint32_t t = gpuc_plan_base_tensor(p, p->args[p->steps[s].args + a]);
      if (first[t] > (int64_t)s) first[t] = s;
      if (last[t] < (int64_t)s) last[t] = s;
    }
}

static bool overlaps(const PlanTensor *a, const PlanTensor *b) {
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* The I/O lists as the public API makes them (roles, in tensor order). */
static uint32_t io_list(const Plan *p, bool out, uint32_t *list) {
  uint32_t n = 0;
  for (uint32_t t = 0; t < p->ntensors; t++) {
    int r = p->tensors[t].role;
    if (r == PLAN_ROLE_INPUT_OUTPUT || r == (out ? PLAN_ROLE_OUTPUT : PLAN_ROLE_INPUT)) list[n++] = t;
  }
  return n;
}

static void check_model(const char *dir, const char *file, const GpucShapeBind *b, int nb, bool fp16,
                        int want_in_place_outputs) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, file);
  Plan *p = compile_model_as(path, b, nb, 90, (CompilePrecision){.fp16 = fp16}, NULL);
  if (!p) return;
  uint32_t *ins = calloc(p->ntensors + 1, 4), *outs = calloc(p->ntensors + 1, 4);
  int64_t *first = calloc(p->ntensors + 1, 8), *last = calloc(p->ntensors + 1, 8);
  uint32_t nin = io_list(p, false, ins), nout = io_list(p, true, outs);
  GpucZcPlan zp;
  GpucErr e = {0};
  CHECK(gpuc_zc_analyze(p, ins, nin, outs, nout, &zp, &e) == 0, "%s: analyze: %s", file, e.msg);
  lifetimes(p, first, last);
  int ok_outputs = 0;
  for (uint32_t i = 0; i < zp.nio; i++) {
    uint32_t t = zp.tensor[i], g = zp.group[i];
    const PlanTensor *pt = &p->tensors[t];
    bool input = i < nin;
    printf("  %-16s %-6s %-24s %10llu bytes  %s\n", file, input ? "input" : "output", gpuc_plan_str(p, pt->name),
           (unsigned long long)pt->bytes, gpuc_zc_why_text((GpucZcWhy)zp.why[i]));
    if (input) CHECK(zp.why[i] == GPUC_ZC_OK, "%s: input %s in place", file, gpuc_plan_str(p, pt->name));
    if (zp.why[i] != GPUC_ZC_OK) continue;
    ok_outputs += !input;
    /* independently: the group's bytes are its own while it matters */
    int64_t from = input ? -1 : first[gpuc_plan_base_tensor(p, t)];
    for (uint32_t u = 0; u < p->ntensors; u++) {
      const PlanTensor *q = &p->tensors[u];
      if (q->mem != PLAN_MEM_ARENA || last[u] < 0 || !overlaps(q, &p->tensors[gpuc_plan_base_tensor(p, t)])) continue;
      bool member = false;
      for (uint32_t m = zp.member_start[g]; m < zp.member_start[g + 1]; m++) member |= zp.members[m] == u;
      if (member) continue;
      CHECK(!input && last[u] <= from, "%s: %s %s shares bytes with %s live at steps %lld..%lld (from %lld)", file,
            input ? "input" : "output", gpuc_plan_str(p, pt->name), gpuc_plan_str(p, q->name),
            (long long)first[u], (long long)last[u], (long long)from);
    }
  }
  CHECK(ok_outputs == want_in_place_outputs, "%s: %d outputs in place, want %d", file, ok_outputs,
        want_in_place_outputs);
  gpuc_zc_free(&zp);
  free(ins); free(outs); free(first); free(last);
  gpuc_plan_free(p);
}

/* ---- hand-made plans for each rule --------------------------------------- */
typedef struct Mini {
  Plan p;
  PlanTensor t[8];
  PlanGemm g[2];
  char strings[8];
} Mini;

/* tensors: 0 input x, 1 weight w, 2 output y; y = x w (one GEMM) */
static void mini(Mini *m) {
  memset(m, 0, sizeof *m);
  m->p.strings = m->strings;
  m->p.strings_size = 1;
  m->p.tensors = m->t;
  m->p.ntensors = 3;
  m->t[0] = (PlanTensor){.dt = GPUC_DT_F32, .rank = 1, .dims = {64}, .mem = PLAN_MEM_ARENA, .role = PLAN_ROLE_INPUT,
                         .offset = 0, .bytes = 256};
  m->t[1] = (PlanTensor){.dt = GPUC_DT_F32, .rank = 1, .dims = {64}, .mem = PLAN_MEM_WEIGHTS, .role = PLAN_ROLE_CONST,
                         .offset = 0, .bytes = 256};
  m->t[2] = (PlanTensor){.dt = GPUC_DT_F32, .rank = 1, .dims = {64}, .mem = PLAN_MEM_ARENA, .role = PLAN_ROLE_OUTPUT,
                         .offset = 256, .bytes = 256};
  m->p.gemms = m->g;
  m->p.ngemms = 1;
  m->g[0] = (PlanGemm){.a = 0, .b = 1, .c = UINT32_MAX, .y = 2, .m = 1, .n = 64, .k = 64, .batch = 1};
}

static GpucZcWhy why_of(Mini *m, uint32_t entry) {
  uint32_t ins[4], outs[4], nin = io_list(&m->p, false, ins), nout = io_list(&m->p, true, outs);
  GpucZcPlan zp;
  GpucErr e = {0};
  if (gpuc_zc_analyze(&m->p, ins, nin, outs, nout, &zp, &e)) return GPUC_ZC_WHY_COUNT_;
  GpucZcWhy w = entry < zp.nio ? (GpucZcWhy)zp.why[entry] : GPUC_ZC_WHY_COUNT_;
  gpuc_zc_free(&zp);
  return w;
}

static void check_rules(void) {
  Mini m;
  mini(&m);
  CHECK(why_of(&m, 0) == GPUC_ZC_OK && why_of(&m, 1) == GPUC_ZC_OK, "plain GEMM: input and output in place");
  mini(&m);
  m.t[2].mem = PLAN_MEM_WEIGHTS; /* an output folded to a constant */
  CHECK(why_of(&m, 1) == GPUC_ZC_WEIGHTS, "a folded output is copied");
  mini(&m);
  m.t[2].role = PLAN_ROLE_INTERNAL; /* the output is now the GEMM's bias row, an input of the model */
  m.t[3] = m.t[2];
  m.t[3].role = PLAN_ROLE_OUTPUT;
  m.p.ntensors = 4;
  m.g[0].y = 3;
  m.g[0].c = 0;
  m.g[0].ldc = 0;
  CHECK(why_of(&m, 0) == GPUC_ZC_BAKED, "an input that is a GEMM's epilogue bias row is copied");
  m.g[0].c = UINT32_MAX;
  m.g[0].flags = PLAN_GEMM_F_BIAS_C;
  m.g[0].reserved = 0;
  CHECK(why_of(&m, 0) == GPUC_ZC_BAKED, "an input that is a GEMM's bias row beside C is copied");
  m.g[0].flags = PLAN_GEMM_F_SPARSE24;
  CHECK(why_of(&m, 0) == GPUC_ZC_BAKED && why_of(&m, 1) == GPUC_ZC_BAKED, "a 2:4 GEMM's A and Y are copied");
  m.g[0].flags = 0;
  m.g[0].compute = PLAN_GEMM_COMPUTE_F8;
  m.g[0].stride_a = 3; /* the per-row scale vector is the output */
  m.g[0].stride_b = 1;
  CHECK(why_of(&m, 0) == GPUC_ZC_OK && why_of(&m, 1) == GPUC_ZC_BAKED, "an FP8 GEMM's scale vector output is copied");
  mini(&m);
  m.t[3] = (PlanTensor){.dt = GPUC_DT_F32, .rank = 1, .dims = {128}, .mem = PLAN_MEM_ALIAS, .role = PLAN_ROLE_INTERNAL,
                        .offset = 2, .bytes = 512};
  m.p.ntensors = 4;
  CHECK(why_of(&m, 1) == GPUC_ZC_VIEW_LARGER, "an output with a larger view is copied");
  m.t[3].bytes = 256;
  CHECK(why_of(&m, 1) == GPUC_ZC_OK, "an output with a view of its size is in place");
  mini(&m);
  m.g[0].y = 0; /* the GEMM writes the input */
  CHECK(why_of(&m, 0) == GPUC_ZC_WRITTEN_INPUT, "an input a step writes is copied");
  /* an input that is also an output: one group, two entries */
  mini(&m);
  m.t[0].role = PLAN_ROLE_INPUT_OUTPUT;
  uint32_t ins[4], outs[4], nin = io_list(&m.p, false, ins), nout = io_list(&m.p, true, outs);
  GpucZcPlan zp;
  GpucErr e = {0};
  CHECK(gpuc_zc_analyze(&m.p, ins, nin, outs, nout, &zp, &e) == 0 && zp.nio == 3 && zp.ngroups == 2 &&
            zp.group[0] == zp.group[1], "an input that is also an output: one group for both entries");
  uint64_t ptr[3] = {0x10000, 0x20000, 0x30000}, key[3];
  uint8_t in_place[3];
  CHECK(gpuc_zc_choose(&zp, ptr, NULL, 0, key, in_place) == 2 && in_place[0] && !in_place[1] && in_place[2] &&
            key[zp.group[0]] == 0x10000, "the input takes the group, its output entry is copied");
  gpuc_zc_free(&zp);
}

/* ---- the per-run choice --------------------------------------------------- */
static uint32_t run(GpucZcPlan *zp, uint64_t x, uint64_t y, const GpucZcRange *own, uint32_t nown, uint8_t *ip,
                    uint64_t *key) {
  uint64_t ptr[2] = {x, y};
  return gpuc_zc_choose(zp, ptr, own, nown, key, ip);
}

static void check_choice(void) {
  Mini m;
  mini(&m);
  uint32_t ins[4], outs[4], nin = io_list(&m.p, false, ins), nout = io_list(&m.p, true, outs);
  GpucZcPlan zp = {0};
  GpucErr e = {0};
  uint8_t ip[2];
  uint64_t key[2];
  GpucZcRange own[1] = {{0x7000000, 0x7100000}};
  const uint64_t A = 0x100000, B = 0x200000, Y1 = 0x300000, Y2 = 0x400000;
#define FRESH() (gpuc_zc_free(&zp), gpuc_zc_analyze(&m.p, ins, nin, outs, nout, &zp, &e))
  FRESH();
  CHECK(run(&zp, A, Y1, own, 1, ip, key) == 2 && key[0] == A && key[1] == Y1, "first device bindings: in place");
  CHECK(run(&zp, A, Y1, own, 1, ip, key) == 2 && key[0] == A && key[1] == Y1, "the same again: the same key");
  /* a new output address: copied once, in place when it comes back */
  CHECK(run(&zp, A, Y2, own, 1, ip, key) == 1 && ip[0] && !ip[1] && key[1] == 0, "a new output address is copied");
  CHECK(run(&zp, A, Y1, own, 1, ip, key) == 2, "a recent address is in place");
  CHECK(run(&zp, A, Y2, own, 1, ip, key) == 2 && key[1] == Y2, "the second time, the new address is in place");
  /* a new address every run: never in place after the first */
  int in_place_outputs = 0;
  for (uint64_t k = 0; k < 20; k++) in_place_outputs += run(&zp, A, 0x1000000 + k * 0x1000, own, 1, ip, key) == 2;
  CHECK(in_place_outputs == 0, "a new output buffer every run stays copied (%d in place)", in_place_outputs);
  /* history: the last GPUC_ZC_HISTORY addresses only (Y1, Y2 are gone) */
  CHECK(run(&zp, A, Y1, own, 1, ip, key) == 1, "an address older than the history is new again");
  /* host bindings and unbound outputs */
  FRESH();
  CHECK(run(&zp, 0, Y1, own, 1, ip, key) == 1 && !ip[0] && ip[1] && key[0] == 0, "a host input is copied");
  CHECK(run(&zp, A, 0, own, 1, ip, key) == 1 && ip[0] && !ip[1], "an unbound output stays in the arena");
  /* alignment */
  FRESH();
  CHECK(run(&zp, A + 16, Y1 + 128, own, 1, ip, key) == 0, "addresses off 256 bytes are copied");
  FRESH();
  CHECK(run(&zp, A + 256, Y1 + 512, own, 1, ip, key) == 2, "addresses on 256 bytes are in place");
  /* the session's own memory */
  FRESH();
  CHECK(run(&zp, 0x7000000, 0x70fff00, own, 1, ip, key) == 0, "the session's own buffers are not rebased");
  FRESH();
  CHECK(run(&zp, A, 0x70fff00 + 256, own, 1, ip, key) == 2, "just past the session's memory is in place");
  /* overlaps: an output over an input is copied; an input over an input is fine */
  FRESH();
  CHECK(run(&zp, A, A, own, 1, ip, key) == 1 && ip[0] && !ip[1], "an output on an in-place input's buffer is copied");
  FRESH();
  CHECK(run(&zp, A, A + 256, own, 1, ip, key) == 2, "an output right after the input is in place");
  /* two inputs on one buffer */
  mini(&m);
  m.t[3] = m.t[0];
  m.t[3].offset = 512;
  m.p.ntensors = 4;
  nin = io_list(&m.p, false, ins);
  nout = io_list(&m.p, true, outs);
  FRESH();
  uint64_t ptr3[3] = {A, A, A}; /* two inputs and the output on one buffer */
  uint64_t key3[3];
  uint8_t ip3[3];
  CHECK(gpuc_zc_choose(&zp, ptr3, own, 1, key3, ip3) == 2 && ip3[0] && ip3[1] && !ip3[2],
        "two inputs may share a buffer; an output over them is copied");
  /* two buffers alternating (a torch loop): both in place after each was seen */
  mini(&m);
  nin = io_list(&m.p, false, ins);
  nout = io_list(&m.p, true, outs);
  FRESH();
  int captured_keys = 0, in_place_runs = 0;
  uint64_t seen[8][2];
  for (int k = 0; k < 12; k++) {
    uint32_t n = run(&zp, k % 2 ? B : A, k % 2 ? Y2 : Y1, own, 1, ip, key);
    in_place_runs += n == 2;
    bool known = false;
    for (int j = 0; j < captured_keys; j++) known |= seen[j][0] == key[0] && seen[j][1] == key[1];
    if (!known && captured_keys < 8) { seen[captured_keys][0] = key[0]; seen[captured_keys][1] = key[1]; captured_keys++; }
  }
  CHECK(in_place_runs >= 10 && captured_keys <= 4, "A/B alternating: %d of 12 runs fully in place, %d keys (<= 4)",
        in_place_runs, captured_keys);
  gpuc_zc_free(&zp);
#undef FRESH
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_zero_copy MODELS_DIR\n"); return 2; }
  const char *dir = argv[1];
  check_rules();
  check_choice();
  GpucShapeBind mlp = {.name = "image", .rank = 2, .dims = {8, 784}};
  GpucShapeBind r50 = {.name = "input", .rank = 4, .dims = {1, 3, 224, 224}};
  check_model(dir, "mlp", &mlp, 1, false, 1);
  check_model(dir, "mlp", &mlp, 1, true, 1);
  check_model(dir, "small_cnn", NULL, 0, false, 1);
  check_model(dir, "resnet_block", NULL, 0, true, 1);
  check_model(dir, "mobile_block", NULL, 0, false, 3);
  check_model(dir, "resnet50", &r50, 1, true, 1);
  GpucShapeBind bert[4] = {{.name = "q", .rank = 4, .dims = {2, 12, 128, 64}},
                           {.name = "k", .rank = 4, .dims = {2, 12, 128, 64}},
                           {.name = "v", .rank = 4, .dims = {2, 12, 128, 64}},
                           {.name = "mask", .rank = 4, .dims = {2, 1, 1, 128}}};
  check_model(dir, "attention_bert", bert, 4, true, 1);
  GpucShapeBind chain = {.name = "x", .rank = 4, .dims = {2, 3, 4, 5}};
  check_model(dir, "shape_chain", &chain, 1, false, 1);
  check_model(dir, "add_layernorm", NULL, 0, true, 4);
  return check_summary();
}
