/* gpuc inspect MODEL.onnx [--dump] [--shape NAME=DIMS]... */
#include "cli.h"
#include <stdio.h>
#include <string.h>

int cmd_inspect(int argc, char **argv) {
  const char *model = NULL;
  bool dump = false;
  GpucShapeBind binds[64];
  int nbinds = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--dump")) dump = true;
    else if (!strcmp(argv[i], "--shape")) {
      if (i + 1 >= argc) return usage_error("--shape needs NAME=DIMS");
      if (nbinds == 64) return usage_error("too many --shape flags");
      if (parse_shape_arg(argv[++i], &binds[nbinds++])) return EXIT_USAGE;
    } else if (argv[i][0] == '-') return usage_error("inspect: unknown flag '%s'", argv[i]);
    else if (!model) model = argv[i];
    else return usage_error("inspect: more than one model given");
  }
  if (!model) return usage_error("inspect: no model given");
  GpucErr e = {0};
  Graph *g = gpuc_onnx_load(model, binds, nbinds, &e);
  if (!g) return report(&e);
  gpuc_graph_summary(g, stdout);
  if (dump) gpuc_graph_dump(g, stdout);
  gpuc_graph_free(g);
  return EXIT_OK;
}
