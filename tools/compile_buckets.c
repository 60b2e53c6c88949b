/* gpuc MODEL.onnx --shape x=1..64x3x224x224 [--buckets LIST]: one plan for
 * a range of shapes (runtime/plan.h "Bucket plans"). Each ranged dim is an
 * axis, named by the model's symbol for it ('batch'), so inputs sharing the
 * symbol follow it; the buckets are the cross product of each axis's sizes
 * (by default the powers of two within the range, plus its top), or the
 * combinations --buckets lists. Every bucket is compiled as a plan of its
 * own (-O3 tunes each), its weights moved into one shared blob where equal
 * bytes are stored once, and the plans become one file
 * (codegen/plan_buckets.c). */
#include "cli.h"
#include "plan_buckets.h"
#include "buckets.h"
#include "session.h"
#include <sys/wait.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int parse_shape_range(char *arg, ShapeRange *r, GpucErr *e) {
  memset(r, 0, sizeof *r);
  char *eq = strrchr(arg, '=');
  if (!eq || eq == arg) return gpuc_err_set(e, "--shape wants NAME=DIMS, got '%s'", arg);
  *eq = 0;
  r->bind.name = arg;
  const char *p = eq + 1;
  if (!*p) return gpuc_err_set(e, "--shape %s: no dims", arg);
  while (*p) {
    char *end;
    errno = 0;
    long long lo = strtoll(p, &end, 10), hi = lo;
    if (end == p || errno || lo < 0) return gpuc_err_set(e, "--shape %s=%s: bad dim", arg, eq + 1);
    p = end;
    if (p[0] == '.' && p[1] == '.') {
      errno = 0;
      hi = strtoll(p + 2, &end, 10);
      if (end == p + 2 || errno || lo < 1 || hi < lo || hi > ((long long)1 << 31))
        return gpuc_err_set(e, "--shape %s=%s: a range is LO..HI with 1 <= LO <= HI", arg, eq + 1);
      p = end;
      if (r->bind.rank < GPUC_MAX_RANK) r->ranged |= 1u << r->bind.rank;
    }
    if (r->bind.rank == GPUC_MAX_RANK) return gpuc_err_set(e, "--shape %s: rank over %d", arg, GPUC_MAX_RANK);
    r->lo[r->bind.rank] = lo;
    r->bind.dims[r->bind.rank++] = hi;
    if (*p == 'x' || *p == 'X' || *p == ',') p++;
    else if (*p) return gpuc_err_set(e, "--shape %s=%s: bad dim separator", arg, eq + 1);
  }
  return 0;
}

/* ---- the axes, from the model's inputs ---- */

typedef struct Axes {
  BucketSpec spec;
  char names[GPUC_PLAN_MAX_AXES][300];
  int64_t (*sizes)[GPUC_PLAN_MAX_AXES];
  char *use_names[512];
  PlanDimUse uses[512];
} Axes;

/* The axis input v's dim d follows: its symbol's, or 'NAME:D' when it has none. */
static void axis_name_of(const Value *v, int d, char *out, size_t n) {
  if (v->sym[d]) snprintf(out, n, "%s", v->sym[d]);
  else snprintf(out, n, "%s:%d", v->name, d);
}

static int find_axis(const Axes *a, const char *name) {
  for (uint32_t i = 0; i < a->spec.naxes; i++)
    if (!strcmp(a->names[i], name)) return (int)i;
  return -1;
}

static bool name_has_mask(const char *s) {
  for (; *s; s++)
    if (!strncasecmp(s, "mask", 4)) return true;
  return false;
}

static int add_use(Axes *a, const char *name, int dim, int axis, bool output, GpucErr *e) {
  if (a->spec.nuses == 512) return gpuc_err_set(e, "more than 512 ranged input/output dims");
  a->use_names[a->spec.nuses] = strdup(name);
  if (!a->use_names[a->spec.nuses]) return gpuc_err_set(e, "out of memory");
  a->uses[a->spec.nuses++] = (PlanDimUse){.dim = (uint8_t)dim, .axis = (uint8_t)axis, .is_output = output};
  return 0;
}

/* Axes from the ranged --shape dims, and which input dims follow each. */
static int find_axes(const Graph *g, const ShapeRange *sr, int nsr, Axes *a, GpucErr *e) {
  for (int k = 0; k < nsr; k++) {
    if (!sr[k].ranged) continue;
    const Value *v = NULL;
    for (int j = 0; j < g->ninputs; j++)
      if (!strcmp(g->values[g->inputs[j]].name, sr[k].bind.name)) v = &g->values[g->inputs[j]];
    if (!v) return gpuc_err_set(e, "%s: --shape names '%s', which is not a graph input", g->path, sr[k].bind.name);
    if (v->t.rank != sr[k].bind.rank)
      return gpuc_err_set(e, "%s: --shape %s has rank %d, the model says rank %d", g->path, v->name, sr[k].bind.rank,
                          v->t.rank);
    for (int d = 0; d < sr[k].bind.rank; d++) {
      if (!(sr[k].ranged & (1u << d))) continue;
      if (v->t.dims[d] >= 0)
        return gpuc_err_set(e, "%s: --shape %s: dim %d is %lld in the model, it takes no range", g->path, v->name, d,
                            (long long)v->t.dims[d]);
      char name[300];
      axis_name_of(v, d, name, sizeof name);
      int ax = find_axis(a, name);
      if (ax >= 0) {
        if (a->spec.axes[ax].lo != sr[k].lo[d] || a->spec.axes[ax].hi != sr[k].bind.dims[d])
          return gpuc_err_set(e, "%s: dim '%s' takes two ranges (%lld..%lld and %lld..%lld)", g->path, name,
                              (long long)a->spec.axes[ax].lo, (long long)a->spec.axes[ax].hi,
                              (long long)sr[k].lo[d], (long long)sr[k].bind.dims[d]);
        continue;
      }
      if (a->spec.naxes == GPUC_PLAN_MAX_AXES)
        return gpuc_err_set(e, "%s: more than %d ranged dims", g->path, GPUC_PLAN_MAX_AXES);
      ax = (int)a->spec.naxes++;
      snprintf(a->names[ax], sizeof a->names[ax], "%s", name);
      a->spec.axis_name[ax] = a->names[ax];
      a->spec.axes[ax] = (PlanAxis){.lo = sr[k].lo[d], .hi = sr[k].bind.dims[d]};
    }
  }
  /* every input dim of an axis: batch if it leads every input it is in */
  for (uint32_t ax = 0; ax < a->spec.naxes; ax++) {
    bool lead = true, masked = false;
    for (int j = 0; j < g->ninputs; j++) {
      const Value *v = &g->values[g->inputs[j]];
      for (int d = 0; d < v->t.rank; d++) {
        char name[300];
        axis_name_of(v, d, name, sizeof name);
        if (v->t.dims[d] >= 0 || strcmp(name, a->names[ax])) continue;
        if (add_use(a, v->name, d, (int)ax, false, e)) return -1;
        lead &= d == 0;
        masked |= name_has_mask(v->name);
      }
    }
    a->spec.axes[ax].flags = lead ? PLAN_AXIS_F_BATCH : masked ? PLAN_AXIS_F_MASKED : 0;
  }
  return 0;
}

/* ---- the buckets ---- */

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* Sizes of axis a by default: the powers of two in lo..hi, and hi. */
static int default_sizes(const PlanAxis *x, int64_t *out) {
  int n = 0;
  for (int64_t s = 1; s < x->hi; s *= 2)
    if (s >= x->lo) out[n++] = s;
  out[n++] = x->hi;
  return n;
}

static int parse_list(const char *s, int64_t *out, int max, const char *what, GpucErr *e) {
  int n = 0;
  while (*s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v < 1) return gpuc_err_set(e, "--buckets %s: bad size", what);
    if (n == max) return gpuc_err_set(e, "--buckets %s: more than %d sizes", what, max);
    out[n++] = v;
    s = end;
    if (*s == ',') s++;
    else if (*s) return gpuc_err_set(e, "--buckets %s: sizes are separated by commas", what);
  }
  return n ? n : gpuc_err_set(e, "--buckets %s: no sizes", what);
}

static int64_t volume(const int64_t *s, uint32_t n) {
  int64_t v = 1;
  for (uint32_t i = 0; i < n; i++) v *= s[i];
  return v;
}

static uint32_t g_cmp_naxes;
static int cmp_bucket(const void *x, const void *y) {
  const int64_t *a = x, *b = y;
  int64_t va = volume(a, g_cmp_naxes), vb = volume(b, g_cmp_naxes);
  if (va != vb) return va < vb ? -1 : 1;
  for (uint32_t i = 0; i < g_cmp_naxes; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/* --buckets: "1,8,32" (the first axis's sizes), "NAME=1,8,32" (axis NAME's;
 * repeatable), or "1x16,8x64" (exactly these combinations, one size per
 * axis). Axes with no list take the default; the bucket of every axis at
 * its top is always there. Sizes outside an axis's range are an error. */
static int make_buckets(Axes *a, const char **lists, int nlists, GpucErr *e) {
  uint32_t na = a->spec.naxes;
  int64_t per[GPUC_PLAN_MAX_AXES][64];
  int nper[GPUC_PLAN_MAX_AXES] = {0};
  int64_t tuples[GPUC_PLAN_MAX_BUCKETS][GPUC_PLAN_MAX_AXES];
  int ntuples = 0;
  for (int k = 0; k < nlists; k++) {
    const char *l = lists[k], *eq = strchr(l, '=');
    if (strchr(l, 'x') && !eq) { /* combinations */
      const char *s = l;
      while (*s) {
        if (ntuples == GPUC_PLAN_MAX_BUCKETS) return gpuc_err_set(e, "--buckets: more than %d", GPUC_PLAN_MAX_BUCKETS);
        memset(tuples[ntuples], 0, sizeof tuples[ntuples]);
        for (uint32_t i = 0; i < na; i++) {
          char *end;
          errno = 0;
          long long v = strtoll(s, &end, 10);
          if (end == s || errno || v < 1) return gpuc_err_set(e, "--buckets %s: bad size", l);
          tuples[ntuples][i] = v;
          s = end;
          if (i + 1 < na) {
            if (*s != 'x') return gpuc_err_set(e, "--buckets %s: each combination has %u sizes (one per ranged dim)", l, na);
            s++;
          }
        }
        ntuples++;
        if (*s == ',') s++;
        else if (*s) return gpuc_err_set(e, "--buckets %s: combinations are separated by commas", l);
      }
      continue;
    }
    int ax = 0;
    if (eq) {
      char name[300];
      snprintf(name, sizeof name, "%.*s", (int)(eq - l), l);
      ax = find_axis(a, name);
      if (ax < 0) {
        char known[1300] = "";
        for (uint32_t i = 0; i < na; i++) { strcat(known, i ? ", " : ""); strcat(known, a->names[i]); }
        return gpuc_err_set(e, "--buckets %s: no ranged dim is named '%s' (ranged: %s)", l, name, known);
      }
      l = eq + 1;
    }
    if ((nper[ax] = parse_list(l, per[ax], 63, lists[k], e)) < 0) return -1;
  }
  for (uint32_t i = 0; i < na; i++) {
    const PlanAxis *x = &a->spec.axes[i];
    if (!nper[i]) nper[i] = default_sizes(x, per[i]);
    for (int j = 0; j < nper[i]; j++)
      if (per[i][j] < x->lo || per[i][j] > x->hi)
        return gpuc_err_set(e, "--buckets: size %lld of '%s' is outside its range %lld..%lld", (long long)per[i][j],
                            a->names[i], (long long)x->lo, (long long)x->hi);
    per[i][nper[i]++] = x->hi; /* the top is always a bucket */
    qsort(per[i], (size_t)nper[i], sizeof per[i][0], cmp_i64);
    int u = 0;
    for (int j = 0; j < nper[i]; j++) if (!u || per[i][j] != per[i][u - 1]) per[i][u++] = per[i][j];
    nper[i] = u;
  }
  if (!ntuples) { /* the cross product */
    int64_t total = 1;
    for (uint32_t i = 0; i < na; i++) total *= nper[i];
    if (total > GPUC_PLAN_MAX_BUCKETS) return gpuc_err_set(e, "%lld buckets: at most %d", (long long)total, GPUC_PLAN_MAX_BUCKETS);
    for (int64_t t = 0; t < total; t++) {
      int64_t r = t;
      memset(tuples[ntuples], 0, sizeof tuples[ntuples]);
      for (int i = (int)na - 1; i >= 0; i--) { tuples[ntuples][i] = per[i][r % nper[i]]; r /= nper[i]; }
      ntuples++;
    }
  } else {
    for (int t = 0; t < ntuples; t++)
      for (uint32_t i = 0; i < na; i++)
        if (tuples[t][i] < a->spec.axes[i].lo || tuples[t][i] > a->spec.axes[i].hi)
          return gpuc_err_set(e, "--buckets: size %lld of '%s' is outside its range %lld..%lld", (long long)tuples[t][i],
                              a->names[i], (long long)a->spec.axes[i].lo, (long long)a->spec.axes[i].hi);
    if (ntuples == GPUC_PLAN_MAX_BUCKETS) return gpuc_err_set(e, "--buckets: more than %d", GPUC_PLAN_MAX_BUCKETS - 1);
    memset(tuples[ntuples], 0, sizeof tuples[ntuples]);
    for (uint32_t i = 0; i < na; i++) tuples[ntuples][i] = a->spec.axes[i].hi;
    ntuples++;
  }
  g_cmp_naxes = na;
  qsort(tuples, (size_t)ntuples, sizeof tuples[0], cmp_bucket);
  int u = 0;
  for (int t = 0; t < ntuples; t++)
    if (!u || memcmp(tuples[t], tuples[u - 1], sizeof tuples[0])) memcpy(tuples[u++], tuples[t], sizeof tuples[0]);
  a->sizes = calloc((size_t)u, sizeof *a->sizes);
  if (!a->sizes) return gpuc_err_set(e, "out of memory");
  memcpy(a->sizes, tuples, (size_t)u * sizeof tuples[0]);
  a->spec.nbuckets = (uint32_t)u;
  a->spec.sizes = (const int64_t (*)[GPUC_PLAN_MAX_AXES])a->sizes;
  return 0;
}

static void bucket_label(const Axes *a, uint32_t b, char *out, size_t n) {
  size_t l = 0;
  out[0] = 0;
  for (uint32_t i = 0; i < a->spec.naxes && l < n; i++)
    l += (size_t)snprintf(out + l, n - l, "%s%s=%lld", i ? " " : "", a->names[i], (long long)a->sizes[b][i]);
}

/* ---- outputs: which dims follow an axis ---- */

static const PlanTensor *io_of(const Plan *p, const char *name, bool output) {
  int i = gpuc_plan_io_index(p, name, output);
  return i < 0 ? NULL : &p->tensors[i];
}

/* An output dim follows axis A when it equals A's size in every bucket and
 * either A has two sizes among the buckets or the model leaves the dim
 * open (symbolic or unknown: g0's output, imported without the ranges). A
 * dim that changes with the bucket in another way (a flattened
 * batch*sequence) cannot be sliced: that model needs one plan per shape. */
static int output_uses(const Graph *g0, Plan **plans, Axes *a, GpucErr *e) {
  uint32_t nb = a->spec.nbuckets, na = a->spec.naxes;
  const Plan *top = plans[nb - 1];
  for (int k = 0; k < g0->noutputs; k++) {
    const Value *ov = &g0->values[g0->outputs[k]];
    const PlanTensor *t = io_of(top, ov->name, true);
    if (!t) continue; /* an output that is also an input, or folded away: the reader checks the rest */
    for (int d = 0; d < t->rank; d++) {
      int found = -1, nfound = 0;
      for (uint32_t ax = 0; ax < na; ax++) {
        bool all = true, two = false;
        for (uint32_t b = 0; b < nb && all; b++) {
          const PlanTensor *bt = io_of(plans[b], ov->name, true);
          all = bt && bt->rank == t->rank && bt->dims[d] == a->sizes[b][ax];
          two |= a->sizes[b][ax] != a->sizes[0][ax];
        }
        bool open = ov->t.rank != t->rank || ov->t.dims[d] < 0;
        if (all && (two || open)) { found = (int)ax; nfound++; }
      }
      if (nfound > 1)
        return gpuc_err_set(e, "%s: output '%s' dim %d equals two ranged dims' sizes in every bucket; list buckets "
                            "that tell them apart (--buckets)", g0->path, ov->name, d);
      if (found >= 0) {
        if (add_use(a, ov->name, d, found, true, e)) return -1;
        continue;
      }
      for (uint32_t b = 0; b < nb; b++) {
        const PlanTensor *bt = io_of(plans[b], ov->name, true);
        if (!bt || bt->rank != t->rank || bt->dims[d] != t->dims[d]) {
          char l0[200], l1[200];
          bucket_label(a, b, l0, sizeof l0);
          bucket_label(a, nb - 1, l1, sizeof l1);
          return gpuc_err_set(e, "%s: output '%s' dim %d is %lld at %s and %lld at %s: it changes with the bucket "
                              "but is no ranged dim, so padding could not be sliced off; compile one shape per plan",
                              g0->path, ov->name, d, bt && bt->rank == t->rank ? (long long)bt->dims[d] : -1LL, l0,
                              (long long)t->dims[d], l1);
        }
      }
    }
  }
  return 0;
}

/* ---- the compile ---- */

/* Compile bucket b (its ranged dims bound to the bucket's sizes) into *out. */
static int compile_bucket(const CompileRequest *base, const ShapeRange *sr, int nsr, const Graph *g0, const Axes *a,
                          uint32_t b, Plan **out, GpucErr *e) {
  GpucShapeBind binds[64];
  int n = 0;
  for (int k = 0; k < nsr; k++) {
    binds[n] = sr[k].bind;
    for (int d = 0; d < sr[k].bind.rank; d++) {
      if (!(sr[k].ranged & (1u << d))) continue;
      const Value *v = NULL;
      for (int j = 0; j < g0->ninputs; j++)
        if (!strcmp(g0->values[g0->inputs[j]].name, sr[k].bind.name)) v = &g0->values[g0->inputs[j]];
      char name[300];
      axis_name_of(v, d, name, sizeof name);
      binds[n].dims[d] = a->sizes[b][find_axis(a, name)];
    }
    n++;
  }
  CompileRequest r = *base;
  r.binds = binds;
  r.nbinds = n;
  r.plan_out = out;
  r.quiet_defaults = b > 0;
  CompileStats st;
  char label[200];
  bucket_label(a, b, label, sizeof label);
  if (compile_model(&r, &st, e)) {
    char what[260];
    snprintf(what, sizeof what, "bucket %s", label);
    gpuc_err_prefix(e, what);
    return -1;
  }
  if (!base->quiet) {
    printf("  bucket %2u %-24s %4d kernels, %3d GEMMs, %3d convs, arena %llu bytes (%.1f s)\n", b, label, st.kernels,
           st.gemms, st.convs, (unsigned long long)st.arena_bytes, st.compile_seconds);
    fflush(stdout);
  }
  return 0;
}

/* Compile every bucket, `jobs` at a time in child processes (NVRTC and the
 * passes are CPU-bound; the GPU is not touched before -O3, which runs
 * after, one bucket at a time). Each child writes its plan to a file,
 * its error to another; the parent reads them back in bucket order. */
static int compile_all(const CompileRequest *base, const ShapeRange *sr, int nsr, const Graph *g0, const Axes *a,
                       int jobs, Plan **plans, GpucErr *e) {
  uint32_t nb = a->spec.nbuckets;
  if (jobs <= 1) {
    for (uint32_t b = 0; b < nb; b++)
      if (compile_bucket(base, sr, nsr, g0, a, b, &plans[b], e)) return -1;
    return 0;
  }
  pid_t *pids = calloc(nb, sizeof *pids);
  if (!pids) return gpuc_err_set(e, "out of memory");
  char tmp[4200];
  int running = 0, rc = 0;
  uint32_t next = 0;
  fflush(stdout);
  fflush(stderr);
  while (next < nb || running > 0) {
    if (next < nb && running < jobs && rc == 0) {
      uint32_t b = next++;
      pid_t pid = fork();
      if (pid < 0) { rc = gpuc_err_set(e, "fork: %s", strerror(errno)); continue; }
      if (pid == 0) { /* the child: compile, write the plan or the error, exit */
        GpucErr ce = {0};
        Plan *p = NULL;
        snprintf(tmp, sizeof tmp, "%s.bucket%u.%ld", base->out, b, (long)getppid());
        int crc = compile_bucket(base, sr, nsr, g0, a, b, &p, &ce) || gpuc_plan_write(p, tmp, &ce);
        if (crc) {
          char ep[4300];
          snprintf(ep, sizeof ep, "%s.err", tmp);
          FILE *f = fopen(ep, "w");
          if (f) { fputs(ce.msg, f); fclose(f); }
        }
        fflush(stdout);
        _exit(crc ? 1 : 0);
      }
      pids[b] = pid;
      running++;
      continue;
    }
    int status;
    pid_t done = wait(&status);
    if (done < 0) break;
    running--;
    for (uint32_t b = 0; b < nb; b++) {
      if (pids[b] != done) continue;
      pids[b] = 0;
      snprintf(tmp, sizeof tmp, "%s.bucket%u.%ld", base->out, b, (long)getpid());
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char ep[4300], msg[1024] = "";
        snprintf(ep, sizeof ep, "%s.err", tmp);
        FILE *f = fopen(ep, "r");
        if (f) { size_t l = fread(msg, 1, sizeof msg - 1, f); msg[l] = 0; fclose(f); unlink(ep); }
        if (rc == 0) rc = gpuc_err_set(e, "%s", *msg ? msg : "a bucket's compile process failed");
      } else if (rc == 0) {
        if (!(plans[b] = gpuc_plan_read(tmp, e))) rc = -1;
      }
      unlink(tmp);
    }
  }
  free(pids);
  return rc ? -1 : 0;
}

/* GPUC_JOBS, else the online CPUs, at most 8 (each holds a model). */
static int compile_jobs(void) {
  const char *env = getenv("GPUC_JOBS");
  if (env && *env) {
    int j = atoi(env);
    return j < 1 ? 1 : j > 64 ? 64 : j;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

int compile_buckets_plan(const CompileRequest *base, const ShapeRange *sr, int nsr, const char **bucket_lists,
                         int nlists, BucketTuneFn tune, const char *tune_cache, int jobs, Plan **out, GpucErr *e) {
  *out = NULL;
  GpucShapeBind fixed[64];
  int nfixed = 0;
  if (nsr > 64) return gpuc_err_set(e, "more than 64 --shape binds");
  for (int k = 0; k < nsr; k++)
    if (!sr[k].ranged) fixed[nfixed++] = sr[k].bind;
  CompileRequest rb = *base;
  if (rb.sm == 0) { /* the present GPU, asked once here: the compile processes do not touch it */
    GpucErr ge = {0};
    rb.sm = gpuc_gpu_sm(&ge);
    if (rb.sm < 0)
      return gpuc_err_set(e, "no GPU here (%s): name the target with --arch sm_80|sm_86|sm_89|sm_90|sm_120", ge.msg);
  }
  Graph *g0 = gpuc_onnx_load(base->model, fixed, nfixed, e);
  if (!g0) return -1;
  Axes *a = calloc(1, sizeof *a);
  Plan **plans = NULL;
  SharedWeights w = {0};
  int rc = -1;
  if (!a) { gpuc_err_set(e, "out of memory"); goto done; }
  if (find_axes(g0, sr, nsr, a, e)) goto done;
  if (make_buckets(a, bucket_lists, nlists, e)) goto done;
  uint32_t nb = a->spec.nbuckets;
  plans = calloc(nb, sizeof *plans);
  if (!plans) { gpuc_err_set(e, "out of memory"); goto done; }
  if (jobs <= 0) jobs = compile_jobs();
  if (!base->quiet) {
    printf("compiling %s for %u shape buckets (%d at a time):", base->model, nb, jobs);
    for (uint32_t i = 0; i < a->spec.naxes; i++)
      printf(" %s %lld..%lld (%s)", a->names[i], (long long)a->spec.axes[i].lo, (long long)a->spec.axes[i].hi,
             (a->spec.axes[i].flags & PLAN_AXIS_F_BATCH)    ? "batch"
             : (a->spec.axes[i].flags & PLAN_AXIS_F_MASKED) ? "sequence, masked"
                                                             : "not paddable: no attention mask");
    printf("\n");
    fflush(stdout);
  }
  if (compile_all(&rb, sr, nsr, g0, a, jobs, plans, e)) goto done;
  for (uint32_t b = 0; b < nb && base->level >= 3 && tune; b++) { /* -O3 tunes each bucket on this GPU, one at a time */
    char label[200], what[260];
    bucket_label(a, b, label, sizeof label);
    snprintf(what, sizeof what, "-O3 bucket %u (%s)", b, label);
    if (!base->quiet) { printf("  %s:", what); fflush(stdout); }
    if (tune(&plans[b], what, tune_cache, e)) { gpuc_err_prefix(e, what); goto done; }
  }
  for (uint32_t b = nb; b-- > 0;) /* largest first: smaller buckets' constants are often its leading bytes */
    if (gpuc_shared_weights_add(&w, plans[b], e)) goto done;
  if (output_uses(g0, plans, a, e)) goto done;
  a->spec.use_name = (const char **)a->use_names;
  a->spec.uses = a->uses;
  int brc = gpuc_plan_buckets_build(&w, plans, nb, &a->spec, out, e);
  free(plans); /* the array; its plans are the build's, also on failure */
  plans = NULL;
  if (brc) goto done;
  if (!base->quiet)
    printf("%u buckets; weights %llu bytes stored once (%llu of the buckets' %llu weight bytes were already stored); "
           "one arena of %llu bytes\n", nb, (unsigned long long)(*out)->weights_size,
           (unsigned long long)w.deduped_bytes, (unsigned long long)w.added_bytes,
           (unsigned long long)gpuc_bucket_arena_bytes(*out));
  rc = 0;
done:
  if (plans)
    for (uint32_t i = 0; i < a->spec.nbuckets; i++) gpuc_plan_free(plans[i]);
  free(plans);
  gpuc_shared_weights_free(&w);
  if (a) {
    for (uint32_t i = 0; i < a->spec.nuses; i++) free(a->use_names[i]);
    free(a->sizes);
  }
  free(a);
  gpuc_graph_free(g0);
  return rc;
}

/* ---- gpuc run / bench PLAN --shape ---- */

int plan_input_dims(const Plan *p, const char *name, const GpucShapeBind *binds, int nbinds, int64_t *dims,
                    GpucErr *e) {
  const PlanTensor *t = io_of(p, name, false);
  if (!t) return gpuc_err_set(e, "the plan has no input named '%s'", name);
  for (int k = 0; k < nbinds; k++)
    if (!strcmp(binds[k].name, name)) { /* its own --shape */
      if (binds[k].rank != t->rank)
        return gpuc_err_set(e, "--shape %s has rank %d, the plan's input has rank %d", name, binds[k].rank, t->rank);
      memcpy(dims, binds[k].dims, sizeof binds[k].dims[0] * (size_t)t->rank);
      return 0;
    }
  int64_t sizes[GPUC_PLAN_MAX_AXES] = {0}; /* an axis no --shape sizes: its top (the container's shape) */
  for (uint32_t a = 0; a < p->naxes; a++) sizes[a] = p->axes[a].hi;
  for (uint32_t u = 0; u < p->ndimuse; u++) {
    const PlanDimUse *d = &p->dimuse[u];
    for (int k = 0; k < nbinds && !d->is_output; k++)
      if (!strcmp(binds[k].name, gpuc_plan_str(p, d->name)) && d->dim < binds[k].rank)
        sizes[d->axis] = binds[k].dims[d->dim];
  }
  for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
  for (uint32_t u = 0; u < p->ndimuse; u++)
    if (!p->dimuse[u].is_output && !strcmp(gpuc_plan_str(p, p->dimuse[u].name), name))
      dims[p->dimuse[u].dim] = sizes[p->dimuse[u].axis];
  return 0;
}
