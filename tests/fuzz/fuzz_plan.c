/* Plan file bytes -> gpuc_plan_read (header, sections, every index and
 * extent) -> gpuc_plan_print (what `gpuc inspect PLAN` shows). The
 * checksum is recomputed first, so mutations reach the checks behind it
 * (a wrong checksum is one comparison, covered by the unit tests). */
#include "fuzz_util.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *b = malloc(size + 1);
  if (!b) return 0;
  memcpy(b, data, size);
  if (size >= sizeof(PlanHeader)) {
    PlanHeader h;
    memcpy(&h, b, sizeof h);
    h.checksum = 0;
    memcpy(b, &h, sizeof h);
    h.checksum = gpuc_fnv1a64(b, size, GPUC_FNV_INIT);
    memcpy(b, &h, sizeof h);
  }
  const char *path = fuzz_file("plan.gpuc", b, size);
  free(b);
  GpucErr e = {0};
  Plan *p = gpuc_plan_read(path, &e);
  if (!p) { fuzz_refused(&e, "plan read"); return 0; }
  FILE *null = fopen("/dev/null", "w");
  if (null) { gpuc_plan_print(p, path, null); fclose(null); }
  gpuc_plan_free(p);
  return 0;
}
