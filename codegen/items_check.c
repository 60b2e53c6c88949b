/* The source-level rule behind "block-size free" (cg_launch_items): a
 * kernel whose body is one GRID_STRIDE loop, with nothing before the loop
 * and no construct that ties a result to the thread, block or warp that
 * computes it, gives the same bytes for any block size: each item's
 * iteration runs the same code on the same inputs whichever thread it
 * lands on, and no state survives from one iteration to the next (the
 * only variables a thread keeps across iterations would have to be
 * declared before the loop, where only constants are allowed).
 *
 * The check reads the kernel as emitted, so a lowering that drifts (a
 * block reduction added to an items kernel) fails the compile instead of
 * making -O3 change results. It is deliberately textual and conservative:
 * a token in a comment or a name refuses the kernel too. */
#include "codegen.h"
#include <string.h>

/* Constructs whose result depends on the launch shape or on scheduling. */
static const char *const forbidden[] = {
  "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", /* the launch shape itself */
  "__shared__", "__syncthreads", "__syncwarp", "__shfl", "__ballot", "__any_sync",
  "__all_sync", "__activemask", "__match", "__reduce_", /* cooperation inside a block/warp */
  "atomic", "cooperative_groups", "clock", "asm", /* scheduling order, raw PTX */
};

const char *cg_items_kernel_check(const char *src, size_t from, const char *name, uint64_t *hash) {
  *hash = 0;
  if (!src || strlen(src) < from) return "its source is missing";
  char head[160];
  size_t nl = strlen(name);
  if (nl + 8 > sizeof head) return "its name is too long";
  memcpy(head, "void ", 5);
  memcpy(head + 5, name, nl);
  memcpy(head + 5 + nl, "(", 2);
  const char *fn = strstr(src + from, head);
  if (!fn) return "its definition is not in the module source";
  /* the kernel's text: to the next kernel (or the end) */
  const char *end = strstr(fn + 1, "extern \"C\"");
  size_t len = end ? (size_t)(end - fn) : strlen(fn);
  const char *body = memchr(fn, '{', len); /* parameter lists hold no braces */
  if (!body) return "no body";
  /* before the loop only `const` declarations: values every thread
   * computes alike, which no iteration can change */
  const char *p = body + 1;
  for (;;) {
    while (*p == ' ' || *p == '\n' || *p == '\t') p++;
    if (strncmp(p, "const ", 6)) break;
    const char *semi = memchr(p, ';', (size_t)(fn + len - p));
    if (!semi) return "an unterminated declaration";
    const char *eq = memchr(p, '=', (size_t)(semi - p)); /* `const T *q` is a pointer that moves */
    if (!eq || memchr(p, '*', (size_t)(eq - p))) return "a declaration before its loop that is not a constant";
    p = semi + 1;
  }
  if (strncmp(p, "GRID_STRIDE(", 12)) return "code other than const declarations before its GRID_STRIDE loop";
  for (const char *q = p + 12; q < fn + len; q++)
    if (!strncmp(q, "GRID_STRIDE(", 12)) return "more than one GRID_STRIDE loop";
  for (size_t k = 0; k < sizeof forbidden / sizeof *forbidden; k++) {
    size_t fl = strlen(forbidden[k]);
    for (const char *q = fn; q + fl <= fn + len; q++)
      if (!strncmp(q, forbidden[k], fl)) return forbidden[k];
  }
  /* the hash leaves the name out: the same kernel in another model (or at
   * another node index) shares its tune-cache entries */
  uint64_t h = GPUC_FNV_INIT;
  for (const char *q = fn; q < fn + len;) {
    if (!strncmp(q, name, nl)) { q += nl; continue; }
    h = gpuc_fnv1a64(q, 1, h);
    q++;
  }
  *hash = h;
  return NULL;
}
