/* gpuc inspect MODEL.onnx [--dump] [--shape NAME=DIMS]... [-O0|-O1|-O2] [--fp16|--bf16]
 *              [--int8 [--int8-skip GLOB]...] [--dump-after PASS]
 * -O1 runs the graph passes before printing (fold, identity, cse, fold_bn, dce, fuse_conv, fuse_matmul, fuse_attention, fuse_add_layernorm, fp16, quantize_int8, fuse_elementwise);
 * --dump-after prints the graph after the named pass (implies -O1). */
#include "cli.h"
#include "passes.h"
#include "plan.h"
#include <stdio.h>
#include <string.h>

int cmd_inspect(int argc, char **argv) {
  const char *model = NULL;
  bool dump = false;
  PassFlags flags = {0};
  int level = 0;
  const char *dump_after = NULL;
  GpucShapeBind binds[64];
  int nbinds = 0;
  for (int i = 0, pf; i < argc; i++) {
    if (!strcmp(argv[i], "--dump")) dump = true;
    else if (!strcmp(argv[i], "-O0") || !strcmp(argv[i], "-O1") || !strcmp(argv[i], "-O2") ||
             !strcmp(argv[i], "-O3")) level = argv[i][2] - '0';
    else if (!strcmp(argv[i], "--dump-after")) {
      static const char *passes =
          "fold, expand_qlinear, prune, identity, cse, fold_bn, dce, batchnorm_affine, fold_conv_bias, "
          "patchify_conv, fuse_conv, gemm_as_matmul, fuse_gelu, fuse_matmul, matmulinteger_int8, fuse_matmul_act, "
          "fuse_attention, attention_gqa_causal, attention_views, fuse_add_layernorm, layout_nhwc, "
          "simplify_transpose, fp16, fuse_conv_act, qdq_int8, quantize_int8, quantize_fp8, fuse_residual_gemm, "
          "fuse_elementwise, fuse_quantize_rows";
      if (i + 1 >= argc) return usage_error("--dump-after needs a pass name (%s)", passes);
      dump_after = argv[++i];
      /* a whole name of the list: bounded by ", " or its ends */
      const char *at = strstr(passes, dump_after);
      size_t len = strlen(dump_after);
      if (!*dump_after || !at || (at != passes && at[-1] != ' ') || (at[len] && at[len] != ','))
        return usage_error("--dump-after: unknown pass '%s' (%s)", dump_after, passes);
      if (level == 0) level = 1;
    }
    else if ((pf = pass_flags_parse(&flags, argc, argv, &i)) != 0) {
      if (pf < 0) return EXIT_USAGE;
    }
    else if (!strcmp(argv[i], "--shape")) {
      if (i + 1 >= argc) return usage_error("--shape needs NAME=DIMS");
      if (nbinds == 64) return usage_error("too many --shape flags");
      if (parse_shape_arg(argv[++i], &binds[nbinds++])) return EXIT_USAGE;
    } else if (argv[i][0] == '-') return usage_error("inspect: unknown flag '%s'", argv[i]);
    else if (!model) model = argv[i];
    else return usage_error("inspect: more than one model given");
  }
  if (!model) return usage_error("inspect: no model given");
  if (pass_flags_check(&flags)) return EXIT_USAGE;
  if ((flags.int8 || flags.fp8) && level == 0) level = 2; /* the int8 layers as a compile makes them */
  if (is_plan_file(model)) {
    GpucErr pe = {0};
    Plan *p = gpuc_plan_read(model, &pe);
    if (!p) return report(&pe);
    gpuc_plan_print(p, model, stdout);
    gpuc_plan_free(p);
    return EXIT_OK;
  }
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, binds, nbinds, &e);
  if (!g) return report(&e);
  PassOptions o;
  gpuc_pass_options_default(&o, level);
  o.dump_after = dump_after;
  pass_flags_apply(&flags, &o);
  if (gpuc_passes_run(g, &o, &e)) { gpuc_graph_free(g); return report(&e); }
  gpuc_graph_summary(g, stdout);
  if (o.int8) gpuc_int8_report(g, &o, stdout);
  if (o.fp8) gpuc_fp8_report(g, &o, stdout);
  if (dump) gpuc_graph_dump(g, stdout);
  gpuc_graph_free(g);
  return EXIT_OK;
}
