/* The GPU's peak rates and the per-step table of `gpuc bench --profile`:
 * measured time per step beside what the step moves and computes (the
 * plan's PlanCost, counted from the IR at compile time), as achieved GB/s
 * and TFLOP/s and their fractions of the peaks. No CUDA calls here: the
 * table is a function of timings and peaks, so it is tested with made-up
 * ones (tests/unit/test_profile.c). */
#ifndef GPUC_PROFILE_H
#define GPUC_PROFILE_H
#include "session.h"
#include <stdio.h>

/* Peak rates; 0 = not known (an attribute missing, an arch not in the
 * table), printed as "n/a". */
typedef struct GpucPeaks {
  double dram_gbs;               /* 2 * memory clock * bus width (DDR) */
  double fp32_tflops;            /* FP32 FMA on the CUDA cores */
  double fp16_tflops;            /* FP16/BF16 tensor cores, dense, FP32 accumulate */
  double fp64_tflops;
} GpucPeaks;

void gpuc_peaks_from_device(const GpucDeviceInfo *d, GpucPeaks *pk);

/* One row of the table. A fraction is the time the step would take at the
 * peak over the time it took; < 0 when the peak is not known. bound is 'M'
 * (memory) when the bandwidth fraction is the larger, 'C' (compute) when the
 * FLOP fraction is, '-' when either is not known. */
typedef struct GpucProfileRow {
  double ms, share;              /* share of the steps' total, 0..1 */
  double mb, gflop;              /* 10^6 bytes, 10^9 flops */
  double gbs, tflops;            /* achieved */
  double peak_tflops;            /* the peak this step's math runs at, 0 unknown */
  double bw_frac, flop_frac;
  char bound;
} GpucProfileRow;

/* Row for step i given the per-step times ms[nsteps]. */
void gpuc_profile_row(const Plan *p, uint32_t i, const double *ms, const GpucPeaks *pk,
                      GpucProfileRow *r);
/* The whole table: a line with the peaks used (derived from d when given),
 * a row per step, a total row. */
void gpuc_profile_print(FILE *f, const Plan *p, const double *ms, const GpucPeaks *pk,
                        const GpucDeviceInfo *d);
#endif
