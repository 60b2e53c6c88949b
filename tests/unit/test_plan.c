/* Plan files without a GPU: compile the bundled MLP and small CNN for
 * several archs with NVRTC, write, read back, write again (byte-exact),
 * then check that corrupted, truncated and other-version plans are refused
 * with a message and never crash. The per-step costs (bytes, FLOPs) of the
 * MLP are checked against numbers worked out by hand from its shapes. The
 * NHWC convolutions of resnet_block --fp16 round-trip (and its kernels are
 * counted); bad layouts are refused.
 * usage: test_plan MODELS_DIR WORKDIR */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include "check.h"
#include "compile_model.h"
#include "sparse_gemm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static Plan *compile_opts(const char *model, const GpucShapeBind *b, int nb, int sm, bool fp16) {
  Plan *p = compile_model(model, b, nb, sm, fp16, NULL);
  if (p) {
    CHECK(p->cubin_size > 0 && p->ptx_size > 1, "%s sm_%d: PTX and CUBIN present", model, sm);
    CHECK(p->meta.arena_bytes <= p->meta.naive_bytes, "arena %llu <= naive %llu",
          (unsigned long long)p->meta.arena_bytes, (unsigned long long)p->meta.naive_bytes);
  }
  return p;
}

static Plan *compile(const char *model, const GpucShapeBind *b, int nb, int sm) {
  return compile_opts(model, b, nb, sm, false);
}

/* Change section `id`'s size by `delta` bytes (or its id to `new_id`) and
 * fix the checksum, so the reader's section checks are what refuse it. */
static void patch_section(unsigned char *c, size_t n, uint32_t id, int64_t delta, uint32_t new_id) {
  PlanHeader h;
  memcpy(&h, c, sizeof h);
  for (uint32_t i = 0; i < h.nsections; i++) {
    PlanSection sec;
    memcpy(&sec, c + sizeof h + i * sizeof sec, sizeof sec);
    if (sec.id != id) continue;
    sec.size = (uint64_t)((int64_t)sec.size + delta);
    if (new_id) sec.id = new_id;
    memcpy(c + sizeof h + i * sizeof sec, &sec, sizeof sec);
  }
  h.checksum = 0;
  memcpy(c, &h, sizeof h);
  h.checksum = gpuc_fnv1a64(c, n, GPUC_FNV_INIT);
  memcpy(c, &h, sizeof h);
}

/* Rewrites the GEMM section of plan image c as format 2/3 wrote it: each
 * record cut to its first PLAN_GEMM_V3_SIZE bytes (the checksum is fixed
 * by a later patch_section). */
static void gemm_records_cut(unsigned char *c, size_t rec);
static void old_gemm_records(unsigned char *c) { gemm_records_cut(c, PLAN_GEMM_V3_SIZE); }
/* ... or as format 4/5 wrote it: records of rec bytes, a prefix of today's */
static void gemm_records_cut(unsigned char *c, size_t rec) {
  PlanHeader h;
  memcpy(&h, c, sizeof h);
  for (uint32_t i = 0; i < h.nsections; i++) {
    PlanSection sec;
    memcpy(&sec, c + sizeof h + i * sizeof sec, sizeof sec);
    if (sec.id != PLAN_SEC_GEMMS) continue;
    uint64_t n = sec.size / sizeof(PlanGemm);
    for (uint64_t k = 0; k < n; k++)
      memmove(c + sec.offset + k * rec, c + sec.offset + k * sizeof(PlanGemm), rec);
    memset(c + sec.offset + n * rec, 0, sec.size - n * rec);
    sec.size = n * rec;
    memcpy(c + sizeof h + i * sizeof sec, &sec, sizeof sec);
  }
}

/* mlp.onnx at batch 4: fc1 = Gemm(image[4,784], W1[256,784]^T, b1[256]) ->
 * h[4,256]; relu1; fc2 = Gemm(hr[4,256], W2[10,256]^T, b2[10]) -> [4,10]. */
static void check_mlp_costs(const Plan *p) {
  CHECK(p->ncosts == p->nsteps, "one cost per step: %u for %u", p->ncosts, p->nsteps);
  int gemm = -1, relu = -1;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind == PLAN_STEP_GEMM && p->gemms[s->index].n == 256 && gemm < 0) gemm = (int)i;
    if (s->kind == PLAN_STEP_KERNEL && !strcmp(gpuc_plan_str(p, s->nodes), "relu1")) relu = (int)i;
  }
  CHECK(gemm >= 0 && relu >= 0, "fc1 GEMM step and relu1 kernel step found");
  if (gemm < 0 || relu < 0) return;
  const PlanGemm *g = &p->gemms[p->steps[gemm].index];
  CHECK(g->m == 4 && g->n == 256 && g->k == 784 && g->batch == 1, "fc1 is 4x256x784");
  uint64_t want_flops = 2ull * 4 * 256 * 784;                    /* 2*M*N*K = 1,605,632 */
  uint64_t want_bytes = 4ull * (4 * 784 + 256 * 784 + 256 + 4 * 256); /* A, B, bias, Y in f32 */
  CHECK(p->costs[gemm].flops == want_flops, "fc1 flops %llu, want %llu",
        (unsigned long long)p->costs[gemm].flops, (unsigned long long)want_flops);
  CHECK(p->costs[gemm].bytes == want_bytes, "fc1 bytes %llu, want %llu",
        (unsigned long long)p->costs[gemm].bytes, (unsigned long long)want_bytes);
  /* Relu reads h[4,256] and writes hr[4,256] (f32): 2 * 4096 bytes, one
   * flop per output element */
  CHECK(p->costs[relu].bytes == 2ull * 4 * 256 * 4, "relu1 bytes %llu, want 8192",
        (unsigned long long)p->costs[relu].bytes);
  CHECK(p->costs[relu].flops == 4ull * 256, "relu1 flops %llu, want 1024",
        (unsigned long long)p->costs[relu].flops);
  /* gpuc inspect lists them */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  gpuc_plan_print(p, "mlp.gpuc", f);
  fclose(f);
  char want[128];
  snprintf(want, sizeof want, "bytes %llu flops %llu  <- fc1", (unsigned long long)want_bytes,
           (unsigned long long)want_flops);
  CHECK(text && strstr(text, want), "inspect lists '%s':\n%s", want, text ? text : "");
  CHECK(text && strstr(text, "bytes 8192 flops 1024  <- relu1"), "inspect lists relu1's cost");
  free(text);
}

/* attention.onnx at batch 2: the fused Attention steps count 2*Sk*(D+Dv)
 * flops per query row, and Q, K, V, mask and Y once each (f32): the
 * self-attention [2,4,33,16] (stored [2,33,4,16]) with a [2,1,1,33] mask,
 * the cross-attention [2,2,33,32] over 20 keys. */
static void check_attention_costs(const char *models) {
  char path[4096];
  snprintf(path, sizeof path, "%s/attention.onnx", models);
  GpucShapeBind b[3] = {{.name = "x", .rank = 3, .dims = {2, 33, 64}},
                        {.name = "mem", .rank = 3, .dims = {2, 20, 64}},
                        {.name = "mask", .rank = 4, .dims = {2, 1, 1, 33}}};
  Plan *p = compile(path, b, 3, 90);
  if (!p) return;
  uint64_t want_flops[2] = {2ull * 2 * 4 * 33 * 33 * 32, 2ull * 2 * 2 * 33 * 20 * 64};
  uint64_t want_bytes[2] = {4ull * (4 * 2 * 33 * 64 + 2 * 33), 4ull * (2 * 2 * 33 * 64 + 2 * 2 * 20 * 64)};
  int n = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    if (p->steps[i].kind != PLAN_STEP_KERNEL || !strstr(gpuc_plan_str(p, p->kernels[p->steps[i].index].name), "Attention"))
      continue;
    if (n < 2) {
      CHECK(p->costs[i].flops == want_flops[n] && p->costs[i].bytes == want_bytes[n],
            "Attention %d: flops %llu bytes %llu, want %llu and %llu", n, (unsigned long long)p->costs[i].flops,
            (unsigned long long)p->costs[i].bytes, (unsigned long long)want_flops[n], (unsigned long long)want_bytes[n]);
    }
    n++;
  }
  CHECK(n == 2, "attention.onnx: %d Attention kernels, want 2", n);
  /* fp32 attention is FMA math; the half kernels are tensor-core math */
  for (int fp16 = 0; fp16 < 2; fp16++) {
    Plan *q = fp16 ? compile_opts(path, b, 3, 90, true) : p;
    int marked = 0, attn = 0;
    for (uint32_t i = 0; q && i < q->nsteps; i++) {
      bool is_attn = q->steps[i].kind == PLAN_STEP_KERNEL &&
                     strstr(gpuc_plan_str(q, q->kernels[q->steps[i].index].name), "Attention");
      attn += is_attn;
      marked += (q->tune[i].flags & PLAN_TUNE_F_TENSOR_MATH) != 0;
      if (!is_attn) CHECK(!(q->tune[i].flags & PLAN_TUNE_F_TENSOR_MATH), "step %u marked tensor-core math", i);
    }
    CHECK(attn == 2 && marked == (fp16 ? 2 : 0), "attention.onnx %s: %d of %d Attention steps tensor-core math",
          fp16 ? "fp16" : "fp32", marked, attn);
    if (fp16) gpuc_plan_free(q);
  }
  gpuc_plan_free(p);
}

static void expect_refused(const char *path, const char *want, const char *what) {
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(path, &e);
  CHECK(p == NULL, "%s: plan accepted", what);
  CHECK(strstr(e.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, e.msg, want);
  gpuc_plan_free(p);
}

/* The plan image ba with section `id` patched (patch_section), written to
 * bad and expected to be refused with `want`; c is scratch of n bytes. */
static void refuse_patched(const unsigned char *ba, unsigned char *c, size_t n, const char *bad, uint32_t id,
                           int64_t delta, uint32_t new_id, const char *want, const char *what) {
  memcpy(c, ba, n);
  patch_section(c, n, id, delta, new_id);
  spit(bad, c, n);
  expect_refused(bad, want, what);
}

/* Write q with one change, expect the reader to refuse it. */
static void refuse_tune(Plan *q, const char *bad, const char *want, const char *what) {
  GpucErr e = {0};
  CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
  expect_refused(bad, want, what);
}

/* The TUNE section: a block -O3 chose (with its grid) is read back; a
 * record that does not fit its step is refused. q is restored. */
static void check_tune_records(Plan *q, const char *bad) {
  uint32_t f = UINT32_MAX, lib = UINT32_MAX;
  for (uint32_t i = 0; i < q->nsteps; i++) {
    if (f == UINT32_MAX && (q->tune[i].flags & PLAN_TUNE_F_BLOCK_FREE)) f = i;
    if (lib == UINT32_MAX && q->steps[i].kind != PLAN_STEP_KERNEL) lib = i;
  }
  CHECK(f != UINT32_MAX && lib != UINT32_MAX, "mlp: a block-size-free kernel and a library call");
  if (f == UINT32_MAX || lib == UINT32_MAX) return;
  PlanStep st = q->steps[f], lst = q->steps[lib];
  PlanTune tn = q->tune[f], ltn = q->tune[lib];
  GpucErr e = {0};
  q->steps[f].block[0] = 128;
  q->steps[f].grid[0] = gpuc_plan_items_grid(tn.items, 128);
  q->tune[f].flags |= PLAN_TUNE_F_BLOCK_TUNED;
  CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
  Plan *r = gpuc_plan_read(bad, &e);
  CHECK(r && r->steps[f].block[0] == 128 && r->steps[f].grid[0] == q->steps[f].grid[0] &&
            r->tune[f].flags == (PLAN_TUNE_F_BLOCK_FREE | PLAN_TUNE_F_BLOCK_TUNED),
        "a tuned block survives the round trip: %s", e.msg);
  gpuc_plan_free(r);
  q->steps[f].grid[0] += 1;
  refuse_tune(q, bad, "block-free launch", "a free step whose grid is not its items'");
  q->steps[f].grid[0] -= 1;
  q->steps[f].block[0] = 48;
  q->steps[f].grid[0] = gpuc_plan_items_grid(tn.items, 48);
  refuse_tune(q, bad, "block-free launch", "a free step's block of part of a warp");
  q->steps[f] = st;
  q->tune[f] = tn;
  q->tune[f].items = 0;
  refuse_tune(q, bad, "block-free launch", "a free step of no items");
  q->tune[f] = tn;
  q->steps[f].shmem = 1024;
  refuse_tune(q, bad, "block-free launch", "a free step with shared memory");
  q->steps[f] = st;
  q->tune[f].flags |= 1u << 5;
  refuse_tune(q, bad, "tune flags", "an unknown tune flag");
  q->tune[f] = tn;
  q->tune[f].choice = 1;
  refuse_tune(q, bad, "tune flags", "a variant choice before there are variants");
  q->tune[f] = (PlanTune){.flags = PLAN_TUNE_F_BLOCK_TUNED};
  refuse_tune(q, bad, "tune flags", "tuned without being free");
  q->tune[f] = tn;
  q->tune[lib].flags = PLAN_TUNE_F_BLOCK_FREE;
  refuse_tune(q, bad, "library call with a tune record", "a GEMM marked block-size free");
  q->steps[lib] = lst;
  q->tune[lib] = ltn;
}

/* resnet_block --fp16: NHWC convolutions (PlanConv.act's layout bits)
 * survive write -> read -> write byte-exact; a layout other than NCHW/NHWC,
 * stray bits, or NHWC on a 3-D convolution is refused. */
static void check_nhwc_plan(const char *model, const char *a, const char *b, const char *bad) {
  for (int sm = 0; sm < 4; sm++) gpuc_plan_free(compile_opts(model, NULL, 0, (int[]){80, 89, 90, 120}[sm], true));
  Plan *p = compile_opts(model, NULL, 0, 90, true);
  if (!p) return;
  uint32_t nhwc = 0;
  for (uint32_t i = 0; i < p->nconvs; i++) nhwc += GPUC_CONV_LAYOUT(p->convs[i].act) == GPUC_LAYOUT_NHWC;
  CHECK(p->nconvs == 5 && nhwc == 5, "resnet_block fp16: %u of %u convolutions NHWC, expected 5 of 5", nhwc,
        p->nconvs);
  /* kernels: the input's Transpose in and Cast (one), the output's
   * Transpose and Cast; none for block2.down's bias (folded into
   * block2.conv2's) */
  uint32_t kernels = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) kernels += p->steps[i].kind == PLAN_STEP_KERNEL;
  CHECK(kernels == 3, "resnet_block fp16: %u kernel steps, expected 3", kernels);
  GpucErr e = {0};
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  CHECK(q != NULL, "read back the NHWC plan: %s", e.msg);
  if (q) {
    CHECK(q->nconvs == p->nconvs && !memcmp(q->convs, p->convs, p->nconvs * sizeof(PlanConv)),
          "NHWC convolutions survive the round trip");
    CHECK(gpuc_plan_write(q, b, &e) == 0, "rewrite: %s", e.msg);
    size_t na, nb;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "NHWC plan: write -> read -> write is byte-exact");
    free(ba);
    free(bb);
    const struct { uint32_t act, nspatial; const char *what; } bads[] = {
      {GPUC_CONV_ACT_PACK(1, 2), 2, "layout 2"},
      {GPUC_CONV_ACT_PACK(0, 255), 2, "layout 255"},
      {GPUC_CONV_ACT_PACK(1, 1) | (1u << 16), 2, "stray bits above the layout"},
      {GPUC_CONV_ACT_PACK(2, 1), 2, "activation 2"},
      {GPUC_CONV_ACT_PACK(1, 1), 3, "NHWC with 3 spatial dims"},
    };
    for (size_t k = 0; k < sizeof bads / sizeof *bads; k++) {
      PlanConv keep = q->convs[0];
      q->convs[0].act = bads[k].act;
      q->convs[0].nspatial = bads[k].nspatial;
      CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
      expect_refused(bad, "corrupt plan: conv", bads[k].what);
      q->convs[0] = keep;
    }
    /* -O3's choices: a recorded algorithm reads back; one out of range is refused */
    PlanConv keep = q->convs[0];
    q->convs[0].algo = 6;
    CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
    Plan *r = gpuc_plan_read(bad, &e);
    CHECK(r && r->convs[0].algo == 6, "a tuned conv algorithm survives the round trip: %s", e.msg);
    gpuc_plan_free(r);
    for (int32_t algo = -2; algo <= 16; algo += 18) {
      q->convs[0].algo = algo;
      CHECK(gpuc_plan_write(q, bad, &e) == 0, "write: %s", e.msg);
      expect_refused(bad, "corrupt plan: conv", algo < 0 ? "conv algo -2" : "conv algo 16");
    }
    q->convs[0] = keep;
    gpuc_plan_free(q);
  }
  gpuc_plan_free(p);
}

/* mlp.onnx at batch 16 with --prune 2:4 --fp16: fc1 (Gemm, W1 [256,784]
 * with transB, m 16 n 256 k 784) is a 2:4 GEMM, fc2 (n 10) is not. The
 * flag survives write -> read -> write byte-exact and inspect names it; a
 * format-3 header reads every GEMM dense; a flag on a GEMM that cannot be
 * 2:4, an unknown flag bit, and a 2:4 weight with a third nonzero in a
 * group are refused. */
static void check_sparse24_plan(const char *mlp, const char *a, const char *b, const char *bad) {
  GpucShapeBind bind = {.name = "image", .rank = 2, .dims = {16, 784}};
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(mlp, &bind, 1, &e);
  CHECK(g != NULL, "load %s: %s", mlp, e.msg);
  if (!g) return;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  po.fp16 = true;
  po.prune_kind = GPUC_PRUNE_24;
  Plan *p = NULL;
  CodegenOptions co = {.sm = 90, .level = 2, .fp16 = true};
  CompileStats st;
  CHECK(gpuc_passes_run(g, &po, &e) == 0 && gpuc_codegen(g, &co, &p, &st, &e) == 0 && p, "2:4 compile: %s", e.msg);
  gpuc_graph_free(g);
  if (!p) return;
  uint32_t sp = UINT32_MAX, dense = UINT32_MAX;
  for (uint32_t i = 0; i < p->ngemms; i++) {
    if (p->gemms[i].flags & PLAN_GEMM_F_SPARSE24) sp = i;
    else dense = i;
  }
  CHECK(st.gemms_24 == 1 && sp != UINT32_MAX && dense != UINT32_MAX && p->gemms[sp].n == 256 &&
            p->gemms[sp].k == 784 && p->gemms[sp].trans_b,
        "mlp b16 2:4: fc1 sparse (%d sparse GEMMs)", st.gemms_24);
  if (sp == UINT32_MAX || dense == UINT32_MAX) { gpuc_plan_free(p); return; }
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  bool same_flags = q && q->ngemms == p->ngemms;
  for (uint32_t i = 0; same_flags && i < p->ngemms; i++) same_flags = q->gemms[i].flags == p->gemms[i].flags;
  CHECK(same_flags, "GEMM flags survive the round trip: %s", e.msg);
  if (q) {
    CHECK(gpuc_plan_write(q, b, &e) == 0, "rewrite: %s", e.msg);
    size_t na, nb;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "2:4 plan: write -> read -> write is byte-exact");
    char *txt = NULL;
    size_t ntxt = 0;
    FILE *f = open_memstream(&txt, &ntxt);
    gpuc_plan_print(q, a, f);
    fclose(f);
    CHECK(txt && strstr(txt, "2:4 sparse gemm 16x256x784"), "inspect marks the 2:4 GEMM:\n%s", txt ? txt : "");
    free(txt);
    free(ba);
    free(bb);
    q->gemms[dense].flags = PLAN_GEMM_F_SPARSE24;
    refuse_tune(q, bad, "marked 2:4 but is not a half GEMM", "2:4 flag on fc2 (n 10)");
    q->gemms[dense].flags = 1u << 7;
    refuse_tune(q, bad, "flags", "an unknown GEMM flag");
    q->gemms[dense].flags = 0;
    /* format 6: -O3's searched cuSPARSELt configuration survives, is
     * listed, and is refused off a 2:4 GEMM, out of range or unflagged */
    {
      PlanGemm keep = q->gemms[sp];
      const int32_t cfg[4] = {7, 2, 1, 2};
      q->gemms[sp].flags |= PLAN_GEMM_F_SPARSE_CFG;
      memcpy(q->gemms[sp].sparse_cfg, cfg, sizeof cfg);
      CHECK(gpuc_plan_write(q, b, &e) == 0, "write: %s", e.msg);
      Plan *r = gpuc_plan_read(b, &e);
      CHECK(r && (r->gemms[sp].flags & PLAN_GEMM_F_SPARSE_CFG) && !memcmp(r->gemms[sp].sparse_cfg, cfg, sizeof cfg),
            "a searched cuSPARSELt configuration survives the round trip: %s", e.msg);
      char *t2 = NULL;
      size_t n2 = 0;
      FILE *f2 = open_memstream(&t2, &n2);
      if (r) gpuc_plan_print(r, b, f2);
      fclose(f2);
      CHECK(t2 && strstr(t2, "2:4 sparse gemm 16x256x784 batch 1 (searched config 7, split-K 2/1/2)"),
            "inspect lists the searched configuration:\n%s", t2 ? t2 : "");
      free(t2);
      gpuc_plan_free(r);
      q->gemms[sp].sparse_cfg[1] = 0; /* split-K 0 */
      refuse_tune(q, bad, "cuSPARSELt configuration", "a split-K of 0");
      q->gemms[sp].sparse_cfg[1] = 2;
      q->gemms[sp].sparse_cfg[0] = 5000;
      refuse_tune(q, bad, "cuSPARSELt configuration", "a config id past 4095");
      q->gemms[sp] = keep;
      q->gemms[sp].sparse_cfg[0] = 3; /* values without the flag */
      refuse_tune(q, bad, "without its flag", "a configuration without PLAN_GEMM_F_SPARSE_CFG");
      q->gemms[sp] = keep;
      q->gemms[dense].flags = PLAN_GEMM_F_SPARSE_CFG; /* on a dense GEMM */
      q->gemms[dense].sparse_cfg[1] = 1;
      refuse_tune(q, bad, "cuSPARSELt configuration", "a configuration on a GEMM not marked 2:4");
      q->gemms[dense].flags = 0;
      q->gemms[dense].sparse_cfg[1] = 0;
    }
    /* a third nonzero in the first group of fc1's weight [256,784] (K along rows) */
    const PlanTensor *w = &q->tensors[q->gemms[sp].b];
    uint16_t *wd = (uint16_t *)(q->weights + w->offset);
    for (int j = 0; j < 4; j++) wd[j] = 0x3c00; /* 1.0 */
    refuse_tune(q, bad, "more than 2 nonzeros", "a 2:4 GEMM whose weight is not 2:4");
    gpuc_plan_free(q);
  }
  /* the cuSPARSELt path is built where its headers were found (CI: always,
   * scripts/deps.sh fetches them); without a GPU or the library, setup
   * declines (1) with a reason and the session would run the GEMM dense */
  const char *lib = gpuc_sparse_gemm_library();
#ifdef GPUC_HAVE_CUSPARSELT
  CHECK(lib && *lib && !strstr(lib, "built without"), "cuSPARSELt path built: %s", lib);
#else
  CHECK(lib && strstr(lib, "built without"), "stub says why: %s", lib);
#endif
  SparseGemm *sg = NULL;
  size_t ws = 1;
  char why[256] = "";
  GpucErr e2 = {0};
  if (strncmp(lib, "cuSPARSELt ", 11)) { /* no library here (CI): declined, with the reason */
    int rc = gpuc_sparse_gemm_setup(&p->gemms[sp], 0, 0, 0, 0, NULL, &sg, &ws, why, sizeof why, &e2);
    CHECK(rc == 1 && !sg && ws == 0 && *why, "sparse setup without cuSPARSELt declines: rc %d '%s'", rc, why);
  }
  gpuc_sparse_gemm_free(sg);
  gpuc_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: test_plan MODELS_DIR WORKDIR\n"); return 2; }
  char mlp[4096], cnn[4096], a[4096], b[4096], bad[4096];
  snprintf(mlp, sizeof mlp, "%s/mlp.onnx", argv[1]);
  snprintf(cnn, sizeof cnn, "%s/small_cnn.onnx", argv[1]);
  snprintf(a, sizeof a, "%s/a.gpuc", argv[2]);
  snprintf(b, sizeof b, "%s/b.gpuc", argv[2]);
  snprintf(bad, sizeof bad, "%s/bad.gpuc", argv[2]);
  GpucShapeBind bind = {.name = "image", .rank = 2, .dims = {4, 784}};
  const int archs[] = {80, 89, 90, 120};
  for (int i = 0; i < 4; i++) {
    Plan *p = compile(mlp, &bind, 1, archs[i]);
    gpuc_plan_free(p);
  }
  Plan *p = compile(mlp, &bind, 1, 90);
  if (!p) goto out;
  check_mlp_costs(p);
  check_attention_costs(argv[1]);
  GpucErr e = {0};
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  CHECK(q != NULL, "read back: %s", e.msg);
  if (q) {
    CHECK(q->nsteps == p->nsteps && q->ntensors == p->ntensors && q->ngemms == p->ngemms,
          "counts survive the round trip");
    CHECK(q->ncosts == p->ncosts && !memcmp(q->costs, p->costs, p->ncosts * sizeof(PlanCost)),
          "step costs survive the round trip");
    CHECK(q->ntune == p->ntune && !memcmp(q->tune, p->tune, p->ntune * sizeof(PlanTune)),
          "step tune records survive the round trip");
    check_tune_records(q, bad);
    if (q->ngemms) { /* -O3's GEMM choice: an index past the tuned candidates is refused */
      char tuned[4200];
      snprintf(tuned, sizeof tuned, "%s.gemm", bad);
      q->gemms[0].algo_index = GPUC_GEMM_TUNE_MAX - 1;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      Plan *r = gpuc_plan_read(tuned, &e);
      CHECK(r && r->gemms[0].algo_index == GPUC_GEMM_TUNE_MAX - 1, "a tuned GEMM index survives: %s", e.msg);
      gpuc_plan_free(r);
      q->gemms[0].algo_index = GPUC_GEMM_TUNE_MAX;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm algo_index past the candidates");
      q->gemms[0].algo_index = 0;
      /* format 4's dtypes and compute type are checked against the tensors */
      PlanGemm keep = q->gemms[0];
      q->gemms[0].compute = 7;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm of an unknown compute type");
      q->gemms[0] = keep;
      q->gemms[0].compute = PLAN_GEMM_COMPUTE_I32; /* f32 tensors in an int8 GEMM */
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "int8 compute on f32 tensors");
      q->gemms[0] = keep;
      q->gemms[0].y_dt = GPUC_DT_F16;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm output dtype unlike its tensor");
      q->gemms[0] = keep;
      q->gemms[0].flags = 1u << 31;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm with unknown flags");
      q->gemms[0] = keep;
      /* format 4: an epilogue activation after the bias row (fc1 has one) */
      uint32_t ta = q->gemms[0].trans_a;
      q->gemms[0].trans_a = GPUC_GEMM_TRANS_A_PACK(ta, GPUC_GEMM_EPI_GELU);
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      r = gpuc_plan_read(tuned, &e);
      CHECK(r && GPUC_GEMM_EPI(r->gemms[0].trans_a) == GPUC_GEMM_EPI_GELU && GPUC_GEMM_TRANS_A(r->gemms[0].trans_a) == ta,
            "a GEMM's GELU epilogue survives: %s", e.msg);
      gpuc_plan_free(r);
      q->gemms[0].trans_a = GPUC_GEMM_TRANS_A_PACK(ta, GPUC_GEMM_EPI_GELU + 1);
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm epilogue past GELU");
      int64_t ldc = q->gemms[0].ldc;
      q->gemms[0].trans_a = GPUC_GEMM_TRANS_A_PACK(ta, GPUC_GEMM_EPI_RELU);
      q->gemms[0].ldc = q->gemms[0].n;
      CHECK(gpuc_plan_write(q, tuned, &e) == 0, "write: %s", e.msg);
      expect_refused(tuned, "corrupt plan: gemm", "gemm epilogue without a bias row");
      q->gemms[0].ldc = ldc;
      q->gemms[0].trans_a = ta;
    }
    CHECK(gpuc_plan_write(q, b, &e) == 0, "rewrite: %s", e.msg);
    size_t na, nb;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK(ba && bb && na == nb && !memcmp(ba, bb, na), "write -> read -> write is byte-exact");
    /* corruptions */
    if (ba && na > 4096) {
      unsigned char *c = malloc(na);
      memcpy(c, ba, na);
      c[na / 2] ^= 0x55;
      spit(bad, c, na);
      expect_refused(bad, "checksum", "flipped byte");
      spit(bad, ba, na / 3);
      expect_refused(bad, "truncated", "truncated plan");
      memcpy(c, ba, na);
      PlanHeader h;
      memcpy(&h, c, sizeof h);
      h.format_version = 999;
      memcpy(c, &h, sizeof h);
      spit(bad, c, na);
      expect_refused(bad, "rebuild", "other format version");
      h.format_version = 1; /* before the cost section */
      memcpy(c, &h, sizeof h);
      spit(bad, c, na);
      expect_refused(bad, "rebuild", "format version 1");
      /* format 2 (before the TUNE section) still loads, every step fixed;
       * a format-2 header on a file with a TUNE section is refused */
      h.format_version = 2;
      memcpy(c, &h, sizeof h);
      old_gemm_records(c);
      patch_section(c, na, PLAN_SEC_TUNE, 0, 0); /* (only fixes the checksum) */
      spit(bad, c, na);
      expect_refused(bad, "format 2 plan with a tune section", "format 2 with a tune section");
      patch_section(c, na, PLAN_SEC_TUNE, 0, 99);
      spit(bad, c, na);
      {
        GpucErr e2 = {0};
        Plan *r = gpuc_plan_read(bad, &e2);
        CHECK(r != NULL, "a format 2 plan is read: %s", e2.msg);
        bool fixed = r && r->ntune == r->nsteps;
        for (uint32_t i = 0; r && i < r->ntune; i++) fixed = fixed && r->tune[i].flags == 0 && r->tune[i].items == 0;
        CHECK(fixed, "a format 2 plan's steps are all fixed");
        bool same = r && r->ngemms == p->ngemms;
        for (uint32_t i = 0; same && i < r->ngemms; i++)
          same = !memcmp(&r->gemms[i], &p->gemms[i], sizeof(PlanGemm));
        CHECK(same, "a format 2 plan's GEMMs read as float GEMMs of their dtype");
        gpuc_plan_free(r);
      }
      /* format 5 (before cuSPARSELt configurations): shorter GEMM records,
       * read with none */
      memcpy(c, ba, na);
      memcpy(&h, c, sizeof h);
      h.format_version = 5;
      memcpy(c, &h, sizeof h);
      gemm_records_cut(c, PLAN_GEMM_V5_SIZE);
      patch_section(c, na, PLAN_SEC_TUNE, 0, 0); /* (only fixes the checksum) */
      spit(bad, c, na);
      {
        GpucErr e5 = {0};
        Plan *r = gpuc_plan_read(bad, &e5);
        bool same = r && r->ngemms == p->ngemms && r->hdr.format_version == 5;
        for (uint32_t i = 0; same && i < r->ngemms; i++)
          same = !memcmp(&r->gemms[i], &p->gemms[i], sizeof(PlanGemm));
        CHECK(same, "a format 5 plan's GEMMs read as they were, without a cuSPARSELt configuration: %s", e5.msg);
        gpuc_plan_free(r);
      }
      memcpy(c, ba, na);
      memcpy(&h, c, sizeof h);
      h.format_version = GPUC_PLAN_FORMAT_VERSION;
      /* the tune and cost sections must hold exactly one record per step;
       * these carry a good checksum, so the section checks refuse them */
      refuse_patched(ba, c, na, bad, PLAN_SEC_TUNE, -(int64_t)sizeof(PlanTune), 0, "tune section has",
                     "tune section one entry short");
      refuse_patched(ba, c, na, bad, PLAN_SEC_TUNE, 0, 99, "missing", "no tune section");
      refuse_patched(ba, c, na, bad, PLAN_SEC_COSTS, -(int64_t)sizeof(PlanCost), 0, "cost section has",
                     "cost section one entry short");
      refuse_patched(ba, c, na, bad, PLAN_SEC_COSTS, (int64_t)sizeof(PlanCost), 0, /* into the padding */
                     "cost section has", "cost section one entry over");
      refuse_patched(ba, c, na, bad, PLAN_SEC_COSTS, -8, 0, "not a multiple of 16", "cost section of a partial entry");
      refuse_patched(ba, c, na, bad, PLAN_SEC_COSTS, 0, 99, "missing", "no cost section");
      memcpy(c, ba, na);
      memcpy(c, "NOTAPLAN", 8);
      spit(bad, c, na);
      expect_refused(bad, "not a gpuc plan", "bad magic");
      spit(bad, c, 10);
      expect_refused(bad, "not a gpuc plan", "tiny file");
      /* every single-byte flip in the header and section table is refused */
      int accepted = 0;
      for (size_t off = 0; off < 64 + (size_t)h.nsections * sizeof(PlanSection); off++) {
        if (off >= 48 && off < 56) continue; /* the checksum itself: covered below */
        memcpy(c, ba, na);
        c[off] ^= 0x01;
        spit(bad, c, na);
        GpucErr e2;
        Plan *r = gpuc_plan_read(bad, &e2);
        if (r) accepted++;
        gpuc_plan_free(r);
      }
      CHECK(accepted == 0, "%d header/section flips were accepted", accepted);
      free(c);
    }
    free(ba);
    free(bb);
    gpuc_plan_free(q);
  }
  gpuc_plan_free(p);
  p = compile(cnn, NULL, 0, 90);
  gpuc_plan_free(p);
  char rb[4096];
  snprintf(rb, sizeof rb, "%s/resnet_block.onnx", argv[1]);
  check_nhwc_plan(rb, a, b, bad);
  check_sparse24_plan(mlp, a, b, bad);
out:
  return check_summary();
}
