/* FORMATTING TEST, no GPU: the `gpuc bench --profile` table and the peak
 * rates, fed with made-up timings, made-up costs and made-up or datasheet
 * device numbers. It checks the arithmetic (GB/s for a known bytes/time
 * pair, fractions of peak, the M/C bound, totals) and the printed text, not
 * any measurement.
 * usage: test_profile */
#include "profile.h"
#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-9 * fabs((double)(b)) + 1e-12)

static char *print_table(const Plan *p, const double *ms, const GpucPeaks *pk, const GpucDeviceInfo *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  gpuc_profile_print(f, p, ms, pk, d);
  fclose(f);
  return text;
}

/* the row of step `label` in the printed table */
static const char *row_of(const char *text, const char *label) {
  const char *r = strstr(text, label);
  while (r && r > text && r[-1] != '\n') r--;
  return r;
}

static void test_peaks(void) {
  /* H100 SXM at the clocks its datasheet quotes: 989.4 TFLOP/s FP16 tensor
   * at 1.83 GHz, 66.9 FP32 at 1.98 GHz; HBM3 2619 MHz x 5120 bit = 3.35 TB/s */
  GpucDeviceInfo h100 = {.name = "NVIDIA H100 80GB HBM3", .sm = 90, .sms = 132, .clock_khz = 1830000,
                         .mem_clock_khz = 2619000, .bus_bits = 5120};
  GpucPeaks pk;
  gpuc_peaks_from_device(&h100, &pk);
  CHECK(fabs(pk.fp16_tflops - 989.4) < 0.1, "H100 FP16 tensor peak %.2f, want 989.4", pk.fp16_tflops);
  CHECK(NEAR(pk.dram_gbs, 2.0 * 2619e6 * 5120 / 8 / 1e9), "H100 DRAM peak %.2f GB/s", pk.dram_gbs);
  CHECK(fabs(pk.dram_gbs - 3352.3) < 0.1, "H100 DRAM peak %.1f, want 3352.3", pk.dram_gbs);
  h100.clock_khz = 1980000;
  gpuc_peaks_from_device(&h100, &pk);
  CHECK(fabs(pk.fp32_tflops - 66.9) < 0.05, "H100 FP32 peak %.2f, want 66.9", pk.fp32_tflops);
  CHECK(fabs(pk.fp64_tflops - 33.45) < 0.05, "H100 FP64 peak %.2f, want 33.5", pk.fp64_tflops);
  /* A100: 108 SMs x 1.41 GHz: 19.5 FP32, 312 FP16 tensor */
  GpucDeviceInfo a100 = {.name = "NVIDIA A100-SXM4-80GB", .sm = 80, .sms = 108, .clock_khz = 1410000};
  gpuc_peaks_from_device(&a100, &pk);
  CHECK(fabs(pk.fp32_tflops - 19.5) < 0.05 && fabs(pk.fp16_tflops - 311.9) < 0.1,
        "A100 peaks %.2f / %.2f", pk.fp32_tflops, pk.fp16_tflops);
  CHECK(pk.dram_gbs == 0, "no memory attributes: DRAM peak unknown");
  /* GeForce: FP16 with FP32 accumulate at half rate (RTX 4090: 165.2) */
  GpucDeviceInfo g4090 = {.name = "NVIDIA GeForce RTX 4090", .sm = 89, .sms = 128, .clock_khz = 2520000};
  gpuc_peaks_from_device(&g4090, &pk);
  CHECK(fabs(pk.fp16_tflops - 165.2) < 0.1, "RTX 4090 FP16 peak %.2f, want 165.2", pk.fp16_tflops);
  CHECK(fabs(pk.fp32_tflops - 82.6) < 0.1, "RTX 4090 FP32 peak %.2f, want 82.6", pk.fp32_tflops);
  /* an arch not in the table, a missing clock: FLOP peaks unknown */
  GpucDeviceInfo other = {.sm = 100, .sms = 148, .clock_khz = 1965000, .mem_clock_khz = 1, .bus_bits = 8};
  gpuc_peaks_from_device(&other, &pk);
  CHECK(pk.fp32_tflops == 0 && pk.fp16_tflops == 0 && pk.dram_gbs > 0, "unknown arch: FLOP peaks n/a");
  GpucDeviceInfo noclock = {.sm = 90, .sms = 132};
  gpuc_peaks_from_device(&noclock, &pk);
  CHECK(pk.fp32_tflops == 0, "no clock attribute: FLOP peaks n/a");
}

static void test_table(void) {
  /* two steps: an f32 kernel moving 1 MB with 1 MFLOP in 0.01 ms, and an
   * f16 GEMM moving 2 MB with 5 GFLOP in 0.05 ms */
  char strings[] = "\0relu1\0fc1";
  PlanKernel kernels[1] = {{.name = 0}};
  PlanGemm gemms[1] = {{.m = 1, .n = 1, .k = 1, .batch = 1, .dt = GPUC_DT_F16}};
  PlanStep steps[2] = {{.kind = PLAN_STEP_KERNEL, .index = 0, .nodes = 1},
                       {.kind = PLAN_STEP_GEMM, .index = 0, .nodes = 7}};
  PlanCost costs[2] = {{.bytes = 1000000, .flops = 1000000}, {.bytes = 2000000, .flops = 5000000000ull}};
  Plan p = {.strings = strings, .strings_size = sizeof strings, .kernels = kernels, .nkernels = 1,
            .gemms = gemms, .ngemms = 1, .steps = steps, .nsteps = 2, .costs = costs, .ncosts = 2};
  double ms[2] = {0.01, 0.05};
  GpucPeaks pk = {.dram_gbs = 1000, .fp32_tflops = 10, .fp16_tflops = 200, .fp64_tflops = 1};

  GpucProfileRow r;
  gpuc_profile_row(&p, 0, ms, &pk, &r);
  /* 10^6 bytes in 10^-5 s = 10^11 B/s = 100 GB/s */
  CHECK(NEAR(r.gbs, 100.0), "kernel GB/s %.6f, want 100", r.gbs);
  CHECK(NEAR(r.mb, 1.0) && NEAR(r.gflop, 0.001), "kernel MB %.3f GFLOP %.4f", r.mb, r.gflop);
  CHECK(NEAR(r.tflops, 0.1), "kernel TFLOP/s %.6f, want 0.1", r.tflops);
  CHECK(NEAR(r.bw_frac, 0.1) && NEAR(r.flop_frac, 0.01), "kernel fractions %.4f %.4f (FP32 peak)",
        r.bw_frac, r.flop_frac);
  CHECK(r.bound == 'M', "kernel is memory-bound, got %c", r.bound);
  CHECK(NEAR(r.share, 0.01 / 0.06), "kernel share %.4f", r.share);
  gpuc_profile_row(&p, 1, ms, &pk, &r);
  CHECK(NEAR(r.gbs, 40.0) && NEAR(r.tflops, 100.0), "gemm %.3f GB/s %.3f TFLOP/s", r.gbs, r.tflops);
  CHECK(NEAR(r.peak_tflops, 200) && NEAR(r.flop_frac, 0.5), "f16 gemm against the tensor peak: %.3f",
        r.flop_frac);
  CHECK(r.bound == 'C', "gemm is compute-bound, got %c", r.bound);

  GpucDeviceInfo d = {.name = "made up", .sm = 90, .sms = 100, .clock_khz = 1000000,
                      .mem_clock_khz = 1000000, .bus_bits = 4000};
  char *text = print_table(&p, ms, &pk, &d);
  const char *k = row_of(text, "relu1"), *g = row_of(text, "fc1"), *t = row_of(text, "total");
  CHECK(strstr(text, "peaks: DRAM 1000 GB/s (2 x 1000 MHz x 4000 bit); TFLOP/s FP32 10.0, FP16 tensor 200.0"),
        "peaks line:\n%s", text);
  CHECK(strstr(text, "GB/s  TFLOP/s  %pk BW %pk FLOP M/C covers"), "header:\n%s", text);
  CHECK(k && strstr(k, "   100.0 ") && strstr(k, "  10.0%") && strstr(k, "  M  relu1"),
        "kernel row: %.120s", k ? k : "(none)");
  CHECK(g && strstr(g, "    40.0 ") && strstr(g, "  100.000") && strstr(g, "  50.0%  C  fc1"),
        "gemm row: %.120s", g ? g : "(none)");
  /* total: 3 MB in 0.06 ms = 50 GB/s = 5% of 1000; at the peaks the steps
   * would take 1e6/10e12 + 5e9/200e12 s = 25.1 us of 60 us = 41.8% */
  CHECK(t && strstr(t, "0.0600 100.0%") && strstr(t, "    50.0 ") && strstr(t, "   5.0%") &&
        strstr(t, "  41.8%  C"), "total row: %.120s", t ? t : "(none)");
  free(text);

  /* the same kernel marked tensor-core math (the half attention kernels):
   * measured against the FP16 tensor peak, 0.1 of 200 TFLOP/s */
  PlanTune tune[2] = {{.flags = PLAN_TUNE_F_TENSOR_MATH}, {0}};
  p.tune = tune;
  p.ntune = 2;
  gpuc_profile_row(&p, 0, ms, &pk, &r);
  CHECK(NEAR(r.peak_tflops, 200) && NEAR(r.flop_frac, 0.0005), "tensor-core kernel against the tensor peak: %.5f",
        r.flop_frac);
  p.tune = NULL;
  p.ntune = 0;

  /* peaks unknown: fractions print n/a, no bound */
  GpucPeaks none = {0};
  gpuc_profile_row(&p, 0, ms, &none, &r);
  CHECK(r.bw_frac < 0 && r.flop_frac < 0 && r.bound == '-', "no peaks: no fractions");
  CHECK(NEAR(r.gbs, 100.0), "achieved GB/s needs no peak: %.3f", r.gbs);
  text = print_table(&p, ms, &none, NULL);
  k = row_of(text, "relu1");
  CHECK(strstr(text, "peaks: DRAM n/a; TFLOP/s FP32 n/a, FP16 tensor n/a, FP64 n/a\n"), "n/a peaks:\n%s", text);
  CHECK(k && strstr(k, "     n/a      n/a  -  relu1"), "n/a row: %.120s", k ? k : "(none)");
  free(text);
}

int main(void) {
  test_peaks();
  test_table();
  return check_summary();
}
