/* The default for symbolic input dims no --shape bound: 1, as trtexec does
 * ("Dynamic dimensions required for input ..., but no shapes were provided.
 * Automatically overriding shape to: 1x..."). Every unknown dim of an
 * input of known rank becomes 1, whatever its name: a batch of one and,
 * for a transformer, a sequence of one token. The caller prints the note
 * this writes, so the user sees which dims were set and how to bind them. */
#include "ir.h"
#include <stdio.h>
#include <string.h>

int gpuc_graph_default_dims(Graph *g, char *note, size_t n) {
  int count = 0;
  size_t len = 0;
  if (n) note[0] = 0;
  for (int k = 0; k < g->ninputs; k++) {
    Value *v = &g->values[g->inputs[k]];
    if (v->t.rank < 0) continue;
    bool any = false;
    for (int d = 0; d < v->t.rank; d++) any |= v->t.dims[d] < 0;
    if (!any) continue;
    char names[256] = "";
    size_t nl = 0;
    for (int d = 0; d < v->t.rank; d++) {
      if (v->t.dims[d] >= 0) continue;
      v->t.dims[d] = 1;
      count++;
      if (nl < sizeof names)
        nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s", nl ? ", " : "",
                               v->sym[d] ? v->sym[d] : "?");
    }
    char dims[200];
    gpuc_shape_str(&v->t, dims, sizeof dims);
    if (len < n)
      len += (size_t)snprintf(note + len, n - len,
                              "%sinput '%s': symbolic dims %s set to 1, as trtexec does (bind them with --shape %s=DIMS; "
                              "now %s)", len ? "; " : "", v->name, names, v->name, dims);
  }
  return count;
}
