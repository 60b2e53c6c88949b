/* Plan files without a GPU: compile the bundled MLP and small CNN for
 * several archs with NVRTC, write, read back, write again (byte-exact),
 * then check that corrupted, truncated and other-version plans are refused
 * with a message and never crash.
 * usage: test_plan MODELS_DIR WORKDIR */
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...)                                                                 \
  do {                                                                                   \
    if (cond) passed++;                                                                  \
    else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
  } while (0)

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
}

static Plan *compile(const char *model, const GpucShapeBind *b, int nb, int sm) {
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, b, nb, &e);
  CHECK(g != NULL, "load %s: %s", model, e.msg);
  if (!g) return NULL;
  PassOptions po;
  gpuc_pass_options_default(&po, 2);
  CHECK(gpuc_passes_run(g, &po, &e) == 0, "passes: %s", e.msg);
  CodegenOptions co = {.sm = sm, .level = 2};
  Plan *p = NULL;
  CompileStats st;
  int rc = gpuc_codegen(g, &co, &p, &st, &e);
  CHECK(rc == 0 && p, "codegen %s sm_%d: %s", model, sm, e.msg);
  if (p) {
    CHECK(p->cubin_size > 0 && p->ptx_size > 1, "%s sm_%d: PTX and CUBIN present", model, sm);
    CHECK(p->meta.arena_bytes <= p->meta.naive_bytes, "arena %llu <= naive %llu",
          (unsigned long long)p->meta.arena_bytes, (unsigned long long)p->meta.naive_bytes);
  }
  gpuc_graph_free(g);
  return p;
}

static void expect_refused(const char *path, const char *want, const char *what) {
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(path, &e);
  CHECK(p == NULL, "%s: plan accepted", what);
  CHECK(strstr(e.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, e.msg, want);
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
  GpucErr e = {0};
  CHECK(gpuc_plan_write(p, a, &e) == 0, "write: %s", e.msg);
  Plan *q = gpuc_plan_read(a, &e);
  CHECK(q != NULL, "read back: %s", e.msg);
  if (q) {
    CHECK(q->nsteps == p->nsteps && q->ntensors == p->ntensors && q->ngemms == p->ngemms,
          "counts survive the round trip");
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
      memcpy(c, ba, na);
      memcpy(c, "NOTAPLAN", 8);
      spit(bad, c, na);
      expect_refused(bad, "not a gpuc plan", "bad magic");
      spit(bad, c, 10);
      expect_refused(bad, "not a gpuc plan", "tiny file");
      /* every single-byte flip in the header and section table is refused */
      int accepted = 0;
      for (size_t off = 0; off < 64 + 11 * 24; off++) {
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
out:
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
