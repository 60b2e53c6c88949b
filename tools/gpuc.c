/* gpuc: entry point and shared CLI helpers. */
#include "cli.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *usage_text =
    "usage:\n"
    "  gpuc inspect MODEL.onnx [--dump] [--shape NAME=DIMS]... [-O0|-O1|-O2] [--fp16|--bf16] [--int8|--fp8] [--dump-after PASS]\n"
    "  gpuc run MODEL.onnx --cpu [-O0|-O1|-O2] [--fp16|--bf16] [--int8 [--int8-skip GLOB]...|--fp8] [--prune l1:F|2:4] [--input NAME=FILE]...\n"
    "           [--out DIR] [--shape NAME=DIMS]...\n"
    "  gpuc test-onnx DIR [--cpu | --gpu [-O0..-O3]]\n"
    "  gpuc MODEL.onnx [-o PLAN] [-O0|-O1|-O2|-O3] [--fp16|--bf16] [--int8 [--int8-skip GLOB[,GLOB]]...|--fp8]\n"
    "                  [--arch native|sm_XX]\n"
    "                  [--shape NAME=DIMS]... [--mem-limit SIZE] [--tune-cache FILE|none]\n"
    "                  [--prune l1:FRACTION|2:4]\n"
    "  gpuc run PLAN.gpuc [--input NAME=FILE]... [--out DIR]\n"
    "  gpuc inspect PLAN.gpuc\n"
    "  gpuc bench PLAN.gpuc [--iters N] [--warmup N] [--profile]\n"
    "  gpuc train MODEL.onnx --data KIND:PATH [--cpu | --amp [fp16|bf16]] [--epochs N] [--batch B] [--accum K]\n"
    "             [--optimizer sgd|adamw] [--lr X] [--momentum M] [--betas B1,B2] [--weight-decay W]\n"
    "             [--schedule constant|step|cosine] [--warmup STEPS] [--step-size EPOCHS]\n"
    "             [--seed S] [--max-steps N] [--limit N] [--log-every N] [--freeze PATTERN]...\n"
    "             [--augment flip|crop|flip,crop] [--crop-pad P] [--normalize MEAN,STD]\n"
    "             [--checkpoint DIR] [--resume DIR] [--save OUT.onnx] [--mem-limit SIZE] [--arch sm_XX] [-O0|-O2]\n"
    "             [--prune l1:FRACTION|2:4 [--prune-after STEPS]]\n"
    "             on the GPU (--amp: fp16 with a dynamic loss scale; --amp bf16: bf16, no loss scale),\n"
    "             or the CPU reference (--cpu);\n"
    "             KIND:PATH is fashion-mnist:DIR, mnist:DIR, cifar10:DIR or\n"
    "             npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy]\n"
    "  gpuc eval MODEL.onnx|PLAN.gpuc --data KIND:PATH [--cpu] [--fp16|--bf16] [--int8|--fp8] [--prune P] [--batch B] [--limit N]\n"
    "             [--normalize MEAN,STD] [--arch sm_XX] [-O0|-O2]: test loss and accuracy of a classifier\n"
    "             on the test split\n"
    "inputs are .npy files or ONNX TensorProto .pb files; DIMS is like 1x3x224x224.\n"
    "exit status: 0 ok, 1 bad or unsupported model/input, 2 usage error\n";

int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpuc: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n%s", usage_text);
  va_end(ap);
  return EXIT_USAGE;
}

int report(const GpucErr *e) {
  fprintf(stderr, "gpuc: %s\n", e->msg);
  return EXIT_BAD_INPUT;
}

int parse_shape_arg(char *arg, GpucShapeBind *b) {
  GpucErr e = {0};
  return parse_shape_bind(arg, b, &e) ? usage_error("%s", e.msg) : 0;
}

void print_tensor_summary(const char *name, const Tensor *t) {
  char s[200];
  gpuc_shape_str(t, s, sizeof s);
  int64_t n = gpuc_numel(t);
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  int64_t nan = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = gpuc_get_f64(t, i);
    if (isnan(v)) { nan++; continue; }
    if (v < mn) mn = v;
    if (v > mx) mx = v;
    sum += v;
  }
  printf("%s: shape %s %s", name, s, gpuc_dtype_name(t->dt));
  if (n - nan > 0) printf(" min %.6g max %.6g mean %.6g", mn, mx, sum / (double)(n - nan));
  if (nan) printf(" nan %lld", (long long)nan);
  printf("\n");
}

bool is_plan_file(const char *path) {
  /* Not fopen: opening a FIFO for reading waits for a writer forever.
   * Anything that is not a regular file goes on to the ONNX loader, which
   * says what is wrong with it. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st;
  char magic[8] = {0};
  bool yes = !fstat(fd, &st) && S_ISREG(st.st_mode) && read(fd, magic, 8) == 8 &&
             !memcmp(magic, "GPUCPLAN", 8);
  close(fd);
  return yes;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage_error("no command");
  const char *cmd = argv[1];
  if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "test-onnx")) return cmd_test_onnx(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    printf("%s", usage_text);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) { printf("gpuc %s\n", GPUC_VERSION); return EXIT_OK; }
  size_t l = strlen(cmd);
  if (l > 5 && !strcmp(cmd + l - 5, ".onnx")) return cmd_compile(argc - 1, argv + 1);
  return usage_error("unknown command '%s'", cmd);
}
