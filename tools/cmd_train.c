/* gpuc train: train a classifier with the CPU reference (issue 5): data
 * sets, optimizer, schedule, accumulation, checkpoints and resume. The loss is SoftmaxCrossEntropyLoss over the
 * model's single float output; the labels are a new int64 input. */
#include "cli.h"
#include "onnx.pb-c.h"
#include "passes.h"
#include "train.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_double(const char *flag, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
    return usage_error("%s wants a number in [%g, %g], got '%s'", flag, lo, hi, s);
  *out = v;
  return 0;
}

static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return usage_error("%s wants an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
  *out = v;
  return 0;
}

/* Write the model again with the trained parameters as raw_data
 * initializers: everything else in the file is kept as it was. */
static int save_model(const char *src, const char *dst, const Trainer *t, GpucErr *e) {
  uint8_t *buf = NULL;
  size_t len = 0;
  if (gpuc_read_file(src, GPUC_MODEL_MAX_BYTES, &buf, &len, e)) return -1;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (!m || !m->graph) {
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return gpuc_err_set(e, "%s: cannot decode the model again", src);
  }
  int np = gpuc_trainer_nparams(t), rc = -1;
  /* what the unpacked message owned, restored before it is freed */
  Onnx__TensorProto **tp = calloc((size_t)np + 1, sizeof *tp);
  ProtobufCBinaryData *old_raw = calloc((size_t)np + 1, sizeof *old_raw);
  size_t *old_nf = calloc((size_t)np + 1, sizeof *old_nf);
  uint8_t **fresh = calloc((size_t)np + 1, sizeof *fresh);
  uint8_t *out = NULL;
  char tmp[4200];
  if (!tp || !old_raw || !old_nf || !fresh) { gpuc_err_set(e, "out of memory"); goto done; }
  for (int i = 0; i < np; i++) {
    const Tensor *v;
    const char *name = gpuc_trainer_param(t, i, &v);
    for (size_t k = 0; k < m->graph->n_initializer && !tp[i]; k++) {
      Onnx__TensorProto *it = m->graph->initializer[k];
      if (it->name && !strcmp(it->name, name)) tp[i] = it;
    }
    if (!tp[i]) { gpuc_err_set(e, "%s: --save: parameter '%s' is not an initializer", src, name); goto done; }
    if (tp[i]->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
      gpuc_err_unsupported(e, "%s: --save: '%s' is stored as external data", src, name);
      tp[i] = NULL;
      goto done;
    }
    size_t nb = gpuc_tensor_bytes(v);
    if (!(fresh[i] = malloc(nb ? nb : 1))) { gpuc_err_set(e, "out of memory"); goto done; }
    memcpy(fresh[i], v->data, nb); /* f32, little-endian hosts only (as the loader) */
    old_raw[i] = tp[i]->raw_data;
    old_nf[i] = tp[i]->n_float_data;
    tp[i]->has_raw_data = 1;
    tp[i]->raw_data.data = fresh[i];
    tp[i]->raw_data.len = nb;
    tp[i]->n_float_data = 0;
  }
  size_t n = onnx__model_proto__get_packed_size(m);
  if (!(out = malloc(n ? n : 1))) { gpuc_err_set(e, "out of memory"); goto done; }
  onnx__model_proto__pack(m, out);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fwrite(out, 1, n, f) == n;
  if (f && fclose(f)) ok = false;
  if (!ok || rename(tmp, dst)) {
    unlink(tmp);
    gpuc_err_set(e, "%s: cannot write: %s", dst, strerror(errno));
    goto done;
  }
  rc = 0;
done:
  for (int i = 0; tp && i < np; i++) {
    if (!tp[i] || !fresh[i]) continue;
    tp[i]->raw_data = old_raw[i];
    tp[i]->has_raw_data = old_raw[i].data != NULL;
    tp[i]->n_float_data = old_nf[i];
  }
  onnx__model_proto__free_unpacked(m, NULL);
  for (int i = 0; fresh && i < np; i++) free(fresh[i]);
  free(tp); free(old_raw); free(old_nf); free(fresh); free(out);
  return rc;
}

static int parse_choice(const char *flag, const char *v, const char *const *names, int n, int *out) {
  for (int k = 0; k < n; k++)
    if (!strcmp(v, names[k])) { *out = k; return 0; }
  return usage_error("%s: unknown value '%s'", flag, v);
}

static int parse_betas(const char *v, double *b1, double *b2) {
  char *end;
  errno = 0;
  *b1 = strtod(v, &end);
  if (end == v || *end != ',' || errno) return usage_error("--betas wants B1,B2, got '%s'", v);
  const char *s = end + 1;
  *b2 = strtod(s, &end);
  if (end == s || *end || errno || !(*b1 >= 0 && *b1 < 1) || !(*b2 >= 0 && *b2 < 1))
    return usage_error("--betas wants B1,B2 each in [0, 1), got '%s'", v);
  return 0;
}

#define MAX_FREEZE 16

typedef struct TrainArgs {
  const char *model, *data, *save;
  bool cpu, amp, amp_bf16, lr_set, wd_set; /* --amp [fp16] / --amp bf16 */
  int64_t mem_limit;
  int sm, level, augment;
  long long crop_pad;
  double norm_mean, norm_std;
  long long epochs, batch, seed, accum, max_steps, log_every, warmup, step_size, limit;
  int opt, sched;
  double lr, momentum, wd, beta1, beta2;
  const char *checkpoint, *resume;
  const char *freeze[MAX_FREEZE];
  int nfreeze;
  int prune_kind;
  double prune_fraction;
  long long prune_after;
  bool prune_after_set;
} TrainArgs;

/* One flag with its value; returns 0, or usage_error's status. */
static int parse_flag(TrainArgs *a, const char *f, const char *v) {
  static const char *opts[] = {"sgd", "adamw"}, *scheds[] = {"constant", "step", "cosine"};
  if (!strcmp(f, "--data")) a->data = v;
  else if (!strcmp(f, "--save")) a->save = v;
  else if (!strcmp(f, "--checkpoint")) a->checkpoint = v;
  else if (!strcmp(f, "--resume")) a->resume = v;
  else if (!strcmp(f, "--freeze")) {
    if (a->nfreeze == MAX_FREEZE) return usage_error("--freeze: at most %d patterns", MAX_FREEZE);
    if (!*v) return usage_error("--freeze wants a non-empty pattern");
    a->freeze[a->nfreeze++] = v;
  }
  else if (!strcmp(f, "--mem-limit")) {
    if (parse_size(v, &a->mem_limit)) return usage_error("--mem-limit wants a size like 8G or 512M, got '%s'", v);
  }
  else if (!strcmp(f, "--arch")) {
    if (parse_arch(v, &a->sm) || a->sm == 0) return usage_error("--arch wants sm_80, sm_86, sm_87, sm_89, sm_90, sm_100 or sm_120, got '%s'", v);
  }
  else if (!strcmp(f, "--augment")) {
    a->augment = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
      if (!strcmp(w, "flip")) a->augment |= GPUC_AUG_FLIP;
      else if (!strcmp(w, "crop")) a->augment |= GPUC_AUG_CROP;
      else return usage_error("--augment wants flip, crop or flip,crop, got '%s'", v);
    }
    if (!a->augment || strlen(v) >= sizeof buf) return usage_error("--augment wants flip, crop or flip,crop, got '%s'", v);
  }
  else if (!strcmp(f, "--normalize")) return parse_normalize(v, &a->norm_mean, &a->norm_std);
  else if (!strcmp(f, "--prune")) {
    if (gpuc_prune_parse(v, &a->prune_kind, &a->prune_fraction)) return usage_error(GPUC_PRUNE_USAGE "; got '%s'", v);
  }
  else if (!strcmp(f, "--prune-after")) { a->prune_after_set = true; return parse_int(f, v, 0, INT64_MAX, &a->prune_after); }
  else if (!strcmp(f, "--crop-pad")) return parse_int(f, v, 0, 64, &a->crop_pad);
  else if (!strcmp(f, "--epochs")) return parse_int(f, v, 1, 1000, &a->epochs);
  else if (!strcmp(f, "--batch")) return parse_int(f, v, 1, 65536, &a->batch);
  else if (!strcmp(f, "--accum")) return parse_int(f, v, 1, 1024, &a->accum);
  else if (!strcmp(f, "--max-steps")) return parse_int(f, v, 1, INT64_MAX, &a->max_steps);
  else if (!strcmp(f, "--limit")) return parse_int(f, v, 1, INT64_MAX, &a->limit);
  else if (!strcmp(f, "--log-every")) return parse_int(f, v, 1, 1000000, &a->log_every);
  else if (!strcmp(f, "--warmup")) return parse_int(f, v, 0, 100000000, &a->warmup);
  else if (!strcmp(f, "--step-size")) return parse_int(f, v, 1, 1000, &a->step_size);
  else if (!strcmp(f, "--seed")) return parse_int(f, v, 0, INT64_MAX, &a->seed);
  else if (!strcmp(f, "--lr")) { a->lr_set = true; return parse_double(f, v, 0, 100, &a->lr); }
  else if (!strcmp(f, "--momentum")) return parse_double(f, v, 0, 0.999999, &a->momentum);
  else if (!strcmp(f, "--weight-decay")) { a->wd_set = true; return parse_double(f, v, 0, 1, &a->wd); }
  else if (!strcmp(f, "--betas")) return parse_betas(v, &a->beta1, &a->beta2);
  else if (!strcmp(f, "--optimizer")) return parse_choice(f, v, opts, 2, &a->opt);
  else if (!strcmp(f, "--schedule")) return parse_choice(f, v, scheds, 3, &a->sched);
  else return usage_error("train: unknown option '%s'", f);
  return 0;
}

static int parse_args(int argc, char **argv, TrainArgs *a) {
  *a = (TrainArgs){.epochs = 1, .batch = 64, .seed = 1, .accum = 1, .log_every = 100, .step_size = 30,
                   .lr = 0.05, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .level = 2,
                   .crop_pad = 4};
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "--cpu")) a->cpu = true;
    else if (!strcmp(f, "-O0") || !strcmp(f, "-O2")) a->level = f[2] - '0';
    else if (!strcmp(f, "--amp")) {
      /* an optional word: fp16 (the default, loss-scaled) or bf16 */
      a->amp = true;
      if (i + 1 < argc && (!strcmp(argv[i + 1], "fp16") || !strcmp(argv[i + 1], "bf16")))
        a->amp_bf16 = !strcmp(argv[++i], "bf16");
    }
    else if (f[0] == '-' && f[1] == '-') {
      if (i + 1 >= argc) return usage_error("%s needs a value", f);
      int rc = parse_flag(a, f, argv[++i]);
      if (rc) return rc;
    } else if (f[0] == '-') return usage_error("train: unknown option '%s'", f);
    else if (a->model) return usage_error("train: one model only ('%s' and '%s')", a->model, f);
    else a->model = f;
  }
  if (!a->model) return usage_error("train: no model given");
  if (!a->data) return usage_error("train: --data KIND:PATH is required");
  int rc = check_data_spec("train", a->data);
  if (rc) return rc;
  if (a->cpu && (a->amp || a->mem_limit || a->sm))
    return usage_error("train: --amp, --mem-limit and --arch are for the GPU trainer; --cpu trains in fp32 on the host");
  if (a->prune_after_set && !a->prune_kind) return usage_error("train: --prune-after needs --prune 2:4|l1:FRACTION");
  /* PyTorch's AdamW defaults where not given */
  if (a->opt == GPUC_OPT_ADAMW && !a->lr_set) a->lr = 1e-3;
  if (a->opt == GPUC_OPT_ADAMW && !a->wd_set) a->wd = 0.01;
  return 0;
}

int cmd_train(int argc, char **argv) {
  TrainArgs a;
  int prc = parse_args(argc, argv, &a);
  if (prc) return prc;
  GpucErr e = {0};
  Dataset tr = {0}, te = {0};
  bool has_test;
  Trainer *t = NULL;
  int rc = EXIT_BAD_INPUT;
  if (load_data(a.data, &tr, &te, &has_test, &e)) { report(&e); goto done; }
  gpuc_dataset_limit(&tr, a.limit);
  if (a.norm_std > 0) { /* on every pixel of both sets, before anything sees them */
    normalize_data(&tr, a.norm_mean, a.norm_std);
    if (has_test) normalize_data(&te, a.norm_mean, a.norm_std);
  }
  for (;;) {
    if (!(t = gpuc_trainer_new(a.model, a.batch, &e))) { report(&e); goto done; }
    if (a.cpu) break;
    TrainGpuOptions go = {.amp = a.amp, .bf16 = a.amp_bf16, .sm = a.sm, .level = a.level, .mem_limit = a.mem_limit,
                          .adamw = a.opt == GPUC_OPT_ADAMW, .accum = (int)a.accum,
                          .prune = a.prune_kind != GPUC_PRUNE_NONE};
    int grc = gpuc_trainer_use_gpu(t, &go, stdout, &e);
    if (!grc) break;
    /* over --mem-limit: the same step as micro-batches half as big,
     * accumulated twice as often, until one fits */
    if (grc == GPUC_TRAIN_TOO_BIG && a.batch % 2 == 0 && a.accum * 2 <= 1024) {
      printf("--mem-limit: %s\n  -> trying micro-batches of %lld x accum %lld (BatchNormalization then sees "
             "the smaller batches)\n", e.msg, a.batch / 2, a.accum * 2);
      a.batch /= 2;
      a.accum *= 2;
      gpuc_trainer_free(t);
      t = NULL;
      e = (GpucErr){0};
      continue;
    }
    if (grc != GPUC_TRAIN_TOO_BIG) gpuc_err_prefix(&e, "the GPU trainer (--cpu trains on the CPU reference)");
    report(&e);
    goto done;
  }
  static const char *opt_names[] = {"sgd", "adamw"}, *sched_names[] = {"constant", "step", "cosine"};
  printf("training %s on the %s: %lld images, %d parameter tensors, batch %lld x accum %lld, %s lr %g "
         "(%s, warmup %lld), momentum %g, weight decay %g, seed %lld\n", a.model,
         a.cpu ? "CPU" : a.amp_bf16 ? "GPU (amp bf16)" : a.amp ? "GPU (amp)" : "GPU", (long long)tr.n,
         gpuc_trainer_nparams(t), a.batch, a.accum, opt_names[a.opt], a.lr, sched_names[a.sched], a.warmup,
         a.momentum, a.wd, a.seed);
  TrainOptions o = {.epochs = (int)a.epochs, .batch = a.batch, .accum = (int)a.accum,
                    .max_steps = a.max_steps, .opt = (GpucOptimizer)a.opt, .lr = a.lr, .momentum = a.momentum,
                    .weight_decay = a.wd, .beta1 = a.beta1, .beta2 = a.beta2, .eps = 1e-8,
                    .sched = (GpucSchedule)a.sched, .warmup = a.warmup, .step_size = (int)a.step_size,
                    .seed = (uint64_t)a.seed, .log_every = (int)a.log_every, .log = stdout,
                    .checkpoint_dir = a.checkpoint, .resume_dir = a.resume, .freeze = a.freeze,
                    .nfreeze = a.nfreeze, .augment = a.augment, .crop_pad = (int)a.crop_pad,
                    .prune_kind = a.prune_kind, .prune_fraction = a.prune_fraction,
                    .prune_after = a.prune_after};
  TrainResult r;
  if (gpuc_trainer_fit(t, &tr, has_test ? &te : NULL, &o, &r, &e)) { report(&e); goto done; }
  if (has_test)
    printf("final test accuracy %.2f%% after %d epoch%s, %.1f s\n", 100.0 * r.test_accuracy, (int)a.epochs,
           a.epochs > 1 ? "s" : "", r.seconds);
  else
    printf("done after %d epoch%s, %.1f s (no test set given)\n", (int)a.epochs, a.epochs > 1 ? "s" : "",
           r.seconds);
  if (a.amp && !a.amp_bf16) /* the skips count from the start of training, a resumed checkpoint's included */
    printf("final loss scale %g, skipped %lld steps\n", r.loss_scale, (long long)r.amp_skipped);
  if (a.save) {
    if (save_model(a.model, a.save, t, &e)) { report(&e); goto done; }
    printf("saved %s\n", a.save);
  }
  rc = EXIT_OK;
done:
  gpuc_trainer_free(t);
  gpuc_dataset_free(&tr);
  gpuc_dataset_free(&te);
  return rc;
}
