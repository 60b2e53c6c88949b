/* gpuc MODEL.onnx [-o PLAN] [-O0|-O1|-O2|-O3] [--fp16|--bf16] [--int8 [--int8-skip GLOB[,GLOB]]...] [--arch A]
 *                 [--shape NAME=DIMS]... [--mem-limit SIZE] [--tune-cache FILE|none]
 *                 [--prune l1:FRACTION|2:4] [--buckets LIST]
 * A range in a --shape (x=1..64x3x224x224) makes a bucket plan
 * (tools/compile_buckets.c). Import, run the passes of the level, generate code, write the plan. Works
 * without a GPU when --arch names the target. */
#include "cli.h"
#include "codegen.h"
#include "passes.h"
#include "session.h"
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* -O3: load the plan just written on the present GPU, time its library
 * calls' candidates and its free kernels' block sizes
 * (runtime/gpu/autotune.c) and write it again with the fastest recorded. No GPU: the plan keeps -O2's heuristics, and says so. */
int autotune_plan(const char *path, const char *cache) {
  GpucErr e = {0};
  if (gpuc_gpu_sm(&e) < 0) {
    printf("  note: -O3 tunes on the GPU the plan runs on; none here (%s): the plan uses -O2's heuristics\n", e.msg);
    return EXIT_OK;
  }
  Plan *p = gpuc_plan_read(path, &e);
  GpucTuneStats ts;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int rc = !p || autotune_plan_in_memory(&p, path, cache, &ts, &e) || gpuc_plan_write(p, tmp, &e);
  if (!rc && rename(tmp, path)) { rc = 1; gpuc_err_set(&e, "%s: cannot replace: %s", path, strerror(errno)); }
  if (rc) unlink(tmp);
  gpuc_plan_free(p);
  if (rc) { gpuc_err_prefix(&e, "-O3 autotuning"); return report(&e); }
  char chosen[160] = ""; /* "; 3 at 128, 1 at 512": how many kernels chose each block */
  static const int sizes[5] = {64, 128, 256, 512, 1024}; /* GpucTuneStats.blocks_chosen */
  for (int k = 0, n = 0; k < 5; k++)
    if (ts.blocks_chosen[k])
      n += snprintf(chosen + n, sizeof chosen - (size_t)n, "%s%d at %d", n ? ", " : "; ", ts.blocks_chosen[k],
                    sizes[k]);
  printf("  autotuned on this GPU in %.1f s: %d convolutions (%d from the cache)%s, %d GEMMs (%d from the cache)%s, "
         "%d kernel block sizes (%d from the cache, %d changed%s)%s; "
         "plan %.4f ms with the heuristics, %.4f ms tuned%s%s\n", ts.seconds, ts.convs, ts.convs_cached,
         ts.convs_reverted ? " not kept: the plan was not faster" : "", ts.gemms, ts.gemms_cached,
         ts.gemms_reverted ? " not kept: the plan was not faster" : "", ts.blocks, ts.blocks_cached,
         ts.blocks_changed, chosen, ts.blocks_reverted ? " not kept: the plan was not faster" : "", ts.ms_heuristic,
         ts.ms_tuned, cache ? "; cache " : "", cache ? cache : "");
  if (ts.sparse)
    printf("  2:4 GEMMs timed sparse (cuSPARSELt, %d with the configuration its search chose, %d of them from the "
           "cache) against dense (cuBLASLt): %d (%d from the cache), %d run dense%s\n",
           ts.sparse_searched, ts.sparse_cfg_cached, ts.sparse, ts.sparse_cached, ts.sparse_dense,
           ts.sparse_reverted ? " not kept: the plan was not faster" : "");
  return EXIT_OK;
}

/* -O3 of one bucket's plan (compile_buckets_plan's tune step), as a
 * one-shape plan's: through a file, printing what it chose. */
static int tune_bucket(Plan **p, const char *what, const char *cache, GpucErr *e) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s/gpuc-bucket-tune.%ld.gpuc", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid());
  if (gpuc_plan_write(*p, tmp, e)) return -1;
  int rc = autotune_plan(tmp, cache);
  Plan *q = rc ? NULL : gpuc_plan_read(tmp, e);
  unlink(tmp);
  if (rc) return gpuc_err_set(e, "%s: autotuning failed (above)", what);
  if (!q) return -1;
  gpuc_plan_free(*p);
  *p = q;
  return 0;
}

/* One plan for the ranges, written to r->out. */
static int compile_buckets_file(const CompileRequest *r, const ShapeRange *sr, int nsr, const char **lists, int nlists,
                                const char *tune_cache, GpucErr *e) {
  Plan *c = NULL;
  if (compile_buckets_plan(r, sr, nsr, lists, nlists, tune_bucket, tune_cache, 0, &c, e)) return -1;
  int rc = gpuc_plan_write(c, r->out, e);
  gpuc_plan_free(c);
  if (rc) return -1;
  struct stat fst;
  printf("wrote %s: %lld bytes\n", r->out, stat(r->out, &fst) ? -1LL : (long long)fst.st_size);
  return 0;
}

int cmd_compile(int argc, char **argv) {
  CompileRequest r = {.level = 2, .sm = 0};
  static GpucShapeBind binds[64];
  static ShapeRange ranges[64];
  const char *bucket_lists[16];
  int nlists = 0;
  bool ranged = false;
  char outbuf[4096], cachebuf[4096];
  const char *out = NULL, *tune_cache = NULL;
  bool tune_cache_set = false;
  for (int i = 0, pf; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-o")) {
      if (i + 1 >= argc) return usage_error("-o needs a file");
      out = argv[++i];
    } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1") || !strcmp(a, "-O2") || !strcmp(a, "-O3")) {
      r.level = a[2] - '0';
    } else if ((pf = pass_flags_parse(&r.flags, argc, argv, &i)) != 0) {
      if (pf < 0) return EXIT_USAGE;
    } else if (!strcmp(a, "--arch")) {
      if (i + 1 >= argc || parse_arch(argv[i + 1], &r.sm))
        return usage_error("--arch wants native or sm_80|sm_86|sm_89|sm_90|sm_120");
      i++;
    } else if (!strcmp(a, "--shape")) {
      if (i + 1 >= argc) return usage_error("--shape needs NAME=DIMS");
      if (r.nbinds == 64) return usage_error("too many --shape flags");
      GpucErr pe = {0};
      if (parse_shape_range(argv[++i], &ranges[r.nbinds], &pe)) return usage_error("%s", pe.msg);
      ranged |= ranges[r.nbinds].ranged != 0;
      binds[r.nbinds] = ranges[r.nbinds].bind;
      r.nbinds++;
    } else if (!strcmp(a, "--buckets")) {
      if (i + 1 >= argc || !*argv[i + 1]) return usage_error("--buckets wants sizes like 1,8,32 or 1x16,8x64");
      if (nlists == 16) return usage_error("too many --buckets flags");
      bucket_lists[nlists++] = argv[++i];
    } else if (!strcmp(a, "--tune-cache")) {
      if (i + 1 >= argc || !*argv[i + 1]) return usage_error("--tune-cache wants a file, or none");
      tune_cache = strcmp(argv[++i], "none") ? argv[i] : NULL;
      tune_cache_set = true;
    } else if (!strcmp(a, "--mem-limit")) {
      if (i + 1 >= argc || parse_size(argv[i + 1], &r.mem_limit))
        return usage_error("--mem-limit wants a size like 8G or 512M");
      i++;
    } else if (a[0] == '-') {
      return usage_error("unknown flag '%s'", a);
    } else if (!r.model) {
      r.model = a;
    } else {
      return usage_error("more than one model given");
    }
  }
  if (!r.model) return usage_error("no model given");
  if (pass_flags_check(&r.flags)) return EXIT_USAGE;
  if (nlists && !ranged) return usage_error("--buckets needs a range in a --shape, like --shape x=1..64x3x224x224");
  if (!out) { default_plan_path(r.model, outbuf, sizeof outbuf); out = outbuf; }
  r.binds = binds;
  r.out = out;
  GpucErr e = {0};
  if (r.level >= 3 && !tune_cache_set) tune_cache = default_tune_cache(cachebuf, sizeof cachebuf);
  if (ranged) { /* one plan for the ranges: a schedule per bucket */
    return compile_buckets_file(&r, ranges, r.nbinds, bucket_lists, nlists, tune_cache, &e) ? report(&e) : EXIT_OK;
  }
  CompileStats st;
  char *prune_lines = NULL; /* the pass's per-layer lines, printed with the summary */
  size_t prune_len = 0;
  if (r.flags.prune_kind && !(r.prune_report = open_memstream(&prune_lines, &prune_len))) {
    gpuc_err_set(&e, "out of memory");
    return report(&e);
  }
  int crc = compile_model(&r, &st, &e);
  if (r.prune_report) fclose(r.prune_report);
  if (crc) { free(prune_lines); return report(&e); }
  char label[64];
  printf("compiled %s -> %s (sm_%d, -O%d%s)\n", r.model, out, st.sm, r.level,
         pass_flags_label(&r.flags, label, sizeof label));
  printf("  nodes: %d imported, %d after passes\n", st.nodes_in, st.nodes_after);
  printf("  kernels generated: %d; library calls: %d cuBLASLt, %d cuDNN\n", st.kernels, st.gemms, st.convs);
  printf("  arena: %llu bytes (lower bound %llu, naive sum %llu); weights: %llu bytes; workspace: %llu bytes\n",
         (unsigned long long)st.arena_bytes, (unsigned long long)st.lower_bound_bytes,
         (unsigned long long)st.naive_bytes,
         (unsigned long long)st.weight_bytes, (unsigned long long)st.workspace_bytes);
  if (st.inplace_tensors) printf("  in place: %u outputs share their input's bytes\n", st.inplace_tensors);
  if (prune_lines) {
    fputs(prune_lines, stdout);
    free(prune_lines);
    if (r.flags.prune_kind == GPUC_PRUNE_24)
      printf("  2:4 GEMMs: %d of %d run on sparse tensor cores where the GPU and cuSPARSELt allow (half, "
             "sm_80+), else dense\n", st.gemms_24, st.gemms);
  }
  printf("  compile time: %.2f s (NVRTC %.2f s)\n", st.compile_seconds, st.nvrtc_seconds);
  if (r.level >= 3) return autotune_plan(out, tune_cache);
  return EXIT_OK;
}
