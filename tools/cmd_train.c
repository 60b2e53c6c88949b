/* gpuc train: train a classifier on Fashion-MNIST with the CPU reference
 * (issue 5, first slice). The loss is SoftmaxCrossEntropyLoss over the
 * model's single float output; the labels are a new int64 input. */
#include "cli.h"
#include "onnx.pb-c.h"
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

int cmd_train(int argc, char **argv) {
  const char *model = NULL, *data = NULL, *save = NULL;
  bool cpu = false;
  long long epochs = 1, batch = 64, seed = 1;
  double lr = 0.05, momentum = 0.9, wd = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
#define VAL() (has_val ? argv[++i] : NULL)
    if (!strcmp(a, "--cpu")) cpu = true;
    else if (!strcmp(a, "--data") || !strcmp(a, "--epochs") || !strcmp(a, "--batch") ||
             !strcmp(a, "--lr") || !strcmp(a, "--momentum") || !strcmp(a, "--seed") ||
             !strcmp(a, "--save") || !strcmp(a, "--weight-decay")) {
      const char *v = VAL();
      if (!v) return usage_error("%s needs a value", a);
      int rc = 0;
      if (!strcmp(a, "--data")) data = v;
      else if (!strcmp(a, "--save")) save = v;
      else if (!strcmp(a, "--epochs")) rc = parse_int(a, v, 1, 1000, &epochs);
      else if (!strcmp(a, "--batch")) rc = parse_int(a, v, 1, 65536, &batch);
      else if (!strcmp(a, "--seed")) rc = parse_int(a, v, 0, INT64_MAX, &seed);
      else if (!strcmp(a, "--lr")) rc = parse_double(a, v, 0, 100, &lr);
      else if (!strcmp(a, "--momentum")) rc = parse_double(a, v, 0, 0.999999, &momentum);
      else rc = parse_double(a, v, 0, 1, &wd);
      if (rc) return rc;
    } else if (a[0] == '-') return usage_error("train: unknown option '%s'", a);
    else if (model) return usage_error("train: one model only ('%s' and '%s')", model, a);
    else model = a;
#undef VAL
  }
  if (!model) return usage_error("train: no model given");
  if (!data) return usage_error("train: --data fashion-mnist:DIR is required");
  if (strncmp(data, "fashion-mnist:", 14) || !data[14])
    return usage_error("train: --data wants fashion-mnist:DIR, got '%s'", data);
  if (!cpu) return usage_error("train: the GPU trainer is not built yet; use --cpu");
  GpucErr e = {0};
  Dataset tr = {0}, te = {0};
  Trainer *t = NULL;
  int rc = EXIT_BAD_INPUT;
  if (gpuc_dataset_fashion_mnist(data + 14, true, &tr, &e) ||
      gpuc_dataset_fashion_mnist(data + 14, false, &te, &e)) {
    report(&e);
    goto done;
  }
  if (!(t = gpuc_trainer_new(model, batch, &e))) { report(&e); goto done; }
  printf("training %s on the CPU: %lld images, %d parameter tensors, batch %lld, lr %g, momentum %g, "
         "weight decay %g, seed %lld\n", model, (long long)tr.n, gpuc_trainer_nparams(t), batch, lr,
         momentum, wd, seed);
  TrainOptions o = {.epochs = (int)epochs, .batch = batch, .lr = lr, .momentum = momentum,
                    .weight_decay = wd, .seed = (uint64_t)seed, .log_every = 100, .log = stdout};
  TrainResult r;
  if (gpuc_trainer_fit(t, &tr, &te, &o, &r, &e)) { report(&e); goto done; }
  printf("final test accuracy %.2f%% after %d epoch%s, %.1f s\n", 100.0 * r.test_accuracy, (int)epochs,
         epochs > 1 ? "s" : "", r.seconds);
  if (save) {
    if (save_model(model, save, t, &e)) { report(&e); goto done; }
    printf("saved %s\n", save);
  }
  rc = EXIT_OK;
done:
  gpuc_trainer_free(t);
  gpuc_dataset_free(&tr);
  gpuc_dataset_free(&te);
  return rc;
}
