/* The per-value reader counts and per-node drop flags that rewrite passes
 * share (passes.h: PassScratch). */
#include "passes.h"
#include <stdlib.h>

int pass_scratch_new(Graph *g, PassScratch *s, GpucErr *e) {
  size_t nv = (size_t)g->nvalues + 1;
  s->readers = malloc(sizeof(int) * nv);
  s->last = malloc(sizeof(int) * nv);
  s->drop = calloc((size_t)g->nnodes + 1, 1);
  if (!s->readers || !s->last || !s->drop) {
    pass_scratch_free(s);
    return gpuc_err_set(e, "%s: out of memory", g->path);
  }
  gpuc_graph_count_readers(g, s->readers, s->last);
  return 0;
}

void pass_scratch_free(PassScratch *s) {
  free(s->readers);
  free(s->last);
  free(s->drop);
  *s = (PassScratch){0};
}
