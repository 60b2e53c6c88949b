/* Checkpoints: DIR/checkpoint.bin, the whole training state at an epoch
 * boundary. Little-endian, like the rest of gpuc's files:
 *
 *   "GPUCCKPT"  u32 version (2)  u32 optimizer  u32 nparams  f32 loss scale (0: none)
 *   i64 epoch  i64 step  u64 rng  i64 batch  i64 accum  i64 ntrain  u64 file size
 *   i64 --amp clean steps since the scale last changed  i64 --amp skipped steps
 *   per parameter: u32 name length, name, u32 rank, i64 dims[rank],
 *                  f32 values[n], f32 state[slots][n] (SGD 1 slot, AdamW 2)
 *   u64 FNV-1a 64 of every byte before it
 *
 * Version 1 is the same without the two --amp counters (an 80-byte
 * header); it is still read, with both counters 0.
 *
 * Written atomically (temp file in DIR, fsync, rename, fsync DIR). The
 * file is untrusted on load: its size must be exactly what this model and
 * optimizer need before anything is read past the header, so a hostile
 * size cannot cause a large allocation; everything is checked before the
 * trainer is touched, so a refused file leaves it as it was. */
#include "train.h"
#include "plan.h" /* gpuc_fnv1a64, the plan file's checksum too */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC "GPUCCKPT"
#define CKPT_VERSION 2u
#define CKPT_HEADER 96    /* version 2 */
#define CKPT_HEADER_V1 80 /* version 1: up to the file size */

static int slots(GpucOptimizer o) { return o == GPUC_OPT_ADAMW ? 2 : 1; }

static uint64_t fnv1a(const uint8_t *p, size_t n) { return gpuc_fnv1a64(p, n, GPUC_CKPT_FNV_BASIS); }

/* The exact file size for this trainer and optimizer, after a header of
 * `header` bytes. */
static size_t ckpt_size(const Trainer *t, GpucOptimizer o, size_t header) {
  size_t n = header + 8;
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    const char *name = gpuc_trainer_param(t, i, &v);
    n += 4 + strlen(name) + 4 + 8 * (size_t)v->rank + gpuc_tensor_bytes(v) * (size_t)(1 + slots(o));
  }
  return n;
}

typedef struct Cursor { uint8_t *p; size_t off; } Cursor;
static void put(Cursor *c, const void *src, size_t n) { memcpy(c->p + c->off, src, n); c->off += n; }
static void put_u32(Cursor *c, uint32_t v) { put(c, &v, 4); }
static void put_u64(Cursor *c, uint64_t v) { put(c, &v, 8); }
static void get(Cursor *c, void *dst, size_t n) { memcpy(dst, c->p + c->off, n); c->off += n; }
static uint32_t get_u32(Cursor *c) { uint32_t v; get(c, &v, 4); return v; }
static uint64_t get_u64(Cursor *c) { uint64_t v; get(c, &v, 8); return v; }

static void encode(Trainer *t, const TrainState *s, uint8_t *buf, size_t size) {
  Cursor c = {buf, 0};
  put(&c, CKPT_MAGIC, 8);
  put_u32(&c, CKPT_VERSION);
  put_u32(&c, (uint32_t)s->opt);
  put_u32(&c, (uint32_t)gpuc_trainer_nparams(t));
  put(&c, &s->loss_scale, 4);
  put_u64(&c, (uint64_t)s->epoch);
  put_u64(&c, (uint64_t)s->step);
  put_u64(&c, s->rng);
  put_u64(&c, (uint64_t)s->batch);
  put_u64(&c, (uint64_t)s->accum);
  put_u64(&c, (uint64_t)s->ntrain);
  put_u64(&c, (uint64_t)size);
  put_u64(&c, (uint64_t)s->amp_clean);
  put_u64(&c, (uint64_t)s->amp_skipped);
  GPUC_ASSERT(c.off == CKPT_HEADER);
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    const char *name = gpuc_trainer_param(t, i, &v);
    put_u32(&c, (uint32_t)strlen(name));
    put(&c, name, strlen(name));
    put_u32(&c, (uint32_t)v->rank);
    for (int d = 0; d < v->rank; d++) put_u64(&c, (uint64_t)v->dims[d]);
    put(&c, v->data, gpuc_tensor_bytes(v));
    for (int k = 0; k < slots(s->opt); k++) put(&c, gpuc_trainer_state(t, i, k), gpuc_tensor_bytes(v));
  }
  put_u64(&c, fnv1a(buf, c.off));
  GPUC_ASSERT(c.off == size);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int gpuc_checkpoint_save(const char *dir, Trainer *t, const TrainState *s, GpucErr *e) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
  snprintf(tmp, sizeof tmp, "%s/checkpoint.bin.tmp.%ld", dir, (long)getpid());
  if (mkdir(dir, 0777) && errno != EEXIST) return gpuc_err_set(e, "%s: cannot create: %s", dir, strerror(errno));
  size_t size = ckpt_size(t, s->opt, CKPT_HEADER);
  uint8_t *buf = malloc(size);
  if (!buf) return gpuc_err_set(e, "%s: out of memory", path);
  encode(t, s, buf, size);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && !write_all(fd, buf, size) && !fsync(fd);
  int err = errno;
  if (fd >= 0 && close(fd)) ok = false;
  free(buf);
  if (!ok || rename(tmp, path)) {
    if (ok) err = errno;
    unlink(tmp);
    return gpuc_err_set(e, "%s: cannot write: %s", path, strerror(err));
  }
  /* the rename itself is durable once the folder is synced */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) { fsync(dfd); close(dfd); }
  return 0;
}

/* Read exactly n bytes at the current position. */
static int read_all(int fd, uint8_t *p, size_t n) {
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Every parameter record against the trainer: names, ranks, dims. */
static int check_params(Trainer *t, Cursor *c, int ns, const char *path, GpucErr *e) {
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    const char *name = gpuc_trainer_param(t, i, &v);
    uint32_t len = get_u32(c);
    /* the total size matched, so a record as long as the model's stays inside the buffer */
    if (len != strlen(name) || memcmp(c->p + c->off, name, len))
      return gpuc_err_set(e, "%s: parameter %d: the name differs from the model's '%s'", path, i, name);
    c->off += len;
    if (get_u32(c) != (uint32_t)v->rank)
      return gpuc_err_set(e, "%s: parameter '%s' has another rank than in the model", path, name);
    for (int d = 0; d < v->rank; d++)
      if (get_u64(c) != (uint64_t)v->dims[d])
        return gpuc_err_set(e, "%s: parameter '%s' has another shape than in the model", path, name);
    c->off += gpuc_tensor_bytes(v) * (size_t)(1 + ns);
  }
  return 0;
}

static void restore_params(Trainer *t, Cursor *c, int ns) {
  for (int i = 0; i < gpuc_trainer_nparams(t); i++) {
    const Tensor *v;
    gpuc_trainer_param(t, i, &v);
    uint32_t len = get_u32(c); /* checked by check_params */
    c->off += len + 4 + 8 * (size_t)v->rank;
    get(c, v->data, gpuc_tensor_bytes(v));
    for (int k = 0; k < ns; k++) get(c, gpuc_trainer_state(t, i, k), gpuc_tensor_bytes(v));
  }
}

/* Magic and version of the first 12 bytes: the header size of that
 * version, 0 when refused. */
static size_t check_version(const uint8_t *head, const char *path, GpucErr *e) {
  if (memcmp(head, CKPT_MAGIC, 8)) {
    gpuc_err_set(e, "%s: not a gpuc checkpoint (bad magic)", path);
    return 0;
  }
  uint32_t ver;
  memcpy(&ver, head + 8, 4);
  if (ver == 1) return CKPT_HEADER_V1;
  if (ver == CKPT_VERSION) return CKPT_HEADER;
  gpuc_err_set(e, "%s: checkpoint format version %u, this gpuc reads versions 1 and %u", path, ver, CKPT_VERSION);
  return 0;
}

/* --amp's loss-scale state, as the update kernel leaves it: the scale is
 * 0 without --amp, else it starts at 2^16, halves no lower than 1 and
 * doubles up to GPUC_AMP_MAX_SCALE; the clean-step counter restarts at
 * each doubling or skip, so it stays below the doubling interval; clean
 * and skipped steps are steps done. */
static int check_amp(const TrainState *f, const char *path, GpucErr *e) {
  float s = f->loss_scale;
  long long clean = (long long)f->amp_clean, skipped = (long long)f->amp_skipped;
  if (!(s == 0 || (s >= 1 && s <= GPUC_AMP_MAX_SCALE)))
    return gpuc_err_set(e, "%s: loss scale %g is neither 0 (no --amp) nor in [1, 2^64]", path, s);
  if (clean < 0 || clean >= GPUC_AMP_GROWTH_STEPS)
    return gpuc_err_set(e, "%s: %lld clean --amp steps since the loss scale changed, not in [0, %d) "
                        "(it doubles at %d)", path, clean, GPUC_AMP_GROWTH_STEPS, GPUC_AMP_GROWTH_STEPS);
  if (skipped < 0 || skipped > f->step || clean > f->step - skipped)
    return gpuc_err_set(e, "%s: %lld skipped and %lld clean --amp steps do not fit in the %lld steps done",
                        path, skipped, clean, (long long)f->step);
  if (s == 0 && (clean || skipped))
    return gpuc_err_set(e, "%s: loss scale 0 (no --amp) with --amp step counts (%lld clean, %lld skipped)",
                        path, clean, skipped);
  return 0;
}

/* The header after magic and version (hsize bytes in all) against the
 * trainer and this run; on success *s is the checkpoint's state. */
static int check_header(Cursor *c, Trainer *t, TrainState *s, size_t fsize, size_t hsize, const char *path,
                        GpucErr *e) {
  static const char *opt_names[] = {"sgd", "adamw"};
  c->off = 12;
  uint32_t opt = get_u32(c), np = get_u32(c);
  TrainState f = {.opt = s->opt};
  get(c, &f.loss_scale, 4);
  f.epoch = (int64_t)get_u64(c);
  f.step = (int64_t)get_u64(c);
  f.rng = get_u64(c);
  f.batch = (int64_t)get_u64(c);
  f.accum = (int64_t)get_u64(c);
  f.ntrain = (int64_t)get_u64(c);
  uint64_t said = get_u64(c);
  if (hsize == CKPT_HEADER) {
    f.amp_clean = (int64_t)get_u64(c);
    f.amp_skipped = (int64_t)get_u64(c);
  }
  if (said != fsize)
    return gpuc_err_set(e, "%s: %s: the file has %zu bytes, its header says %llu", path,
                        fsize < said ? "truncated" : "trailing bytes", fsize, (unsigned long long)said);
  if (opt != (uint32_t)s->opt)
    return gpuc_err_set(e, "%s: written by --optimizer %s, this run uses %s", path,
                        opt < 2 ? opt_names[opt] : "(unknown)", opt_names[s->opt]);
  if (np != (uint32_t)gpuc_trainer_nparams(t))
    return gpuc_err_set(e, "%s: %u parameters, the model has %d", path, np, gpuc_trainer_nparams(t));
  if (fsize != ckpt_size(t, s->opt, hsize))
    return gpuc_err_set(e, "%s: %zu bytes, this model's checkpoint has %zu: parameters differ", path, fsize,
                        ckpt_size(t, s->opt, hsize));
  if (f.batch != s->batch || f.accum != s->accum || f.ntrain != s->ntrain)
    return gpuc_err_set(e, "%s: written with --batch %lld --accum %lld on %lld images; this run has %lld, "
                        "%lld, %lld (the data order would differ)", path, (long long)f.batch,
                        (long long)f.accum, (long long)f.ntrain, (long long)s->batch, (long long)s->accum,
                        (long long)s->ntrain);
  if (f.epoch < 0 || f.step < 0) return gpuc_err_set(e, "%s: negative epoch or step counter", path);
  if (check_amp(&f, path, e)) return -1;
  *s = f;
  return 0;
}

int gpuc_checkpoint_load(const char *dir, Trainer *t, TrainState *s, GpucErr *e) {
  char path[4200];
  snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return gpuc_err_set(e, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  uint8_t head[CKPT_HEADER];
  uint8_t *buf = NULL;
  int rc = -1;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { gpuc_err_set(e, "%s: not a regular file", path); goto done; }
  size_t fsize = (size_t)st.st_size, hsize = CKPT_HEADER_V1;
  /* version 1's header first: the version says how long the header is */
  if (fsize < hsize + 8 || read_all(fd, head, hsize) || !(hsize = check_version(head, path, e)) ||
      fsize < hsize + 8 || read_all(fd, head + CKPT_HEADER_V1, hsize - CKPT_HEADER_V1)) {
    if (hsize) gpuc_err_set(e, "%s: truncated: %zu bytes, shorter than a checkpoint header", path, fsize);
    goto done;
  }
  Cursor c = {head, 0};
  TrainState want = *s;
  if (check_header(&c, t, &want, fsize, hsize, path, e)) goto done;
  /* fsize is now exactly what this model needs: safe to allocate */
  if (!(buf = malloc(fsize))) { gpuc_err_set(e, "%s: out of memory", path); goto done; }
  memcpy(buf, head, hsize);
  if (read_all(fd, buf + hsize, fsize - hsize)) {
    gpuc_err_set(e, "%s: cannot read: %s", path, strerror(errno));
    goto done;
  }
  uint64_t sum;
  memcpy(&sum, buf + fsize - 8, 8);
  if (sum != fnv1a(buf, fsize - 8)) { gpuc_err_set(e, "%s: checksum mismatch (corrupt file)", path); goto done; }
  c = (Cursor){buf, hsize};
  if (check_params(t, &c, slots(s->opt), path, e)) goto done;
  c.off = hsize;
  restore_params(t, &c, slots(s->opt));
  *s = want;
  rc = 0;
done:
  free(buf);
  close(fd);
  return rc;
}
