/* Peak rates of the GPU and the profile table (see profile.h). */
#include "profile.h"
#include <string.h>

/* FLOPs per clock per SM, dense (an FMA is two), worked back from NVIDIA's
 * published peaks as peak / (SMs * boost clock):
 *   sm_80  A100 (Ampere whitepaper, A100 datasheet): 108 SMs, 1.41 GHz;
 *          FP32 19.5, FP16 tensor 312, FP64 9.7 TFLOP/s -> 128, 2048, 64
 *   sm_86  RTX A6000 (GA102 whitepaper): 84 SMs, 1.80 GHz; FP32 38.7, FP16
 *          tensor with FP32 accumulate 154.8 -> 256, 1024; FP64 is 1/64 of
 *          FP32 on GA10x -> 4
 *   sm_89  RTX 4090 (Ada whitepaper): 128 SMs, 2.52 GHz; FP32 82.6, FP16
 *          tensor 330.3 (FP16 accumulate) -> 256, 1024; FP64 1/64 -> 4
 *   sm_90  H100/H200 SXM (H100 datasheet): 132 SMs; FP32 66.9 and FP64 33.5
 *          at 1.98 GHz -> 256, 128; FP16 tensor 989.4 at 1.83 GHz -> 4096
 *   sm_120 RTX 5090 (Blackwell GeForce whitepaper): 170 SMs, 2.41 GHz; FP32
 *          104.8, FP16 tensor 419 (FP16 accumulate) -> 256, 1024; FP64 -> 4
 * gpuc's GEMMs and convolutions accumulate FP16 in FP32, which GeForce
 * parts of sm_86/89/120 run at half the rate above (RTX 4090: 165.2 vs
 * 330.3 TFLOP/s, Ada whitepaper), so a GeForce name halves the tensor rate.
 * Other archs are not in the table: their FLOP peaks print "n/a". */
static const struct { int sm; int fp32, fp16_tensor, fp64; } per_sm[] = {
  {80, 128, 2048, 64},
  {86, 256, 1024, 4},
  {89, 256, 1024, 4},
  {90, 256, 4096, 128},
  {120, 256, 1024, 4},
};

/* Peak FLOP/s use CU_DEVICE_ATTRIBUTE_CLOCK_RATE, the top SM clock: where
 * the datasheet quotes the tensor peak at a lower clock (H100: 1.83 vs 1.98
 * GHz) the computed peak is that much higher and %peak that much lower. */
void gpuc_peaks_from_device(const GpucDeviceInfo *d, GpucPeaks *pk) {
  memset(pk, 0, sizeof *pk);
  if (d->mem_clock_khz > 0 && d->bus_bits > 0)
    pk->dram_gbs = 2.0 * d->mem_clock_khz * 1e3 * d->bus_bits / 8 / 1e9;
  if (d->sms <= 0 || d->clock_khz <= 0) return;
  for (size_t i = 0; i < sizeof per_sm / sizeof *per_sm; i++) {
    if (per_sm[i].sm != d->sm) continue;
    double clocks = (double)d->sms * d->clock_khz * 1e3 / 1e12; /* tera-SM-clocks per second */
    bool geforce = strstr(d->name, "GeForce") && (d->sm == 86 || d->sm == 89 || d->sm == 120);
    pk->fp32_tflops = clocks * per_sm[i].fp32;
    pk->fp16_tflops = clocks * per_sm[i].fp16_tensor / (geforce ? 2 : 1);
    pk->fp64_tflops = clocks * per_sm[i].fp64;
  }
}

/* The peak a step's math runs at: library calls by their dtype (FP16/BF16
 * on tensor cores; FP32 is FMA math, not TF32), generated kernels on the
 * FP32 cores (they compute in float) unless the plan marks their math as
 * tensor-core (the half attention kernels). */
static double step_peak(const Plan *p, uint32_t i, const GpucPeaks *pk) {
  const PlanStep *s = &p->steps[i];
  bool tensor = s->kind == PLAN_STEP_KERNEL && i < p->ntune && (p->tune[i].flags & PLAN_TUNE_F_TENSOR_MATH);
  uint32_t dt = s->kind == PLAN_STEP_GEMM ? p->gemms[s->index].dt
              : s->kind == PLAN_STEP_CONV ? p->convs[s->index].dt
              : tensor ? GPUC_DT_F16 : GPUC_DT_F32;
  if (dt == GPUC_DT_I8) return 2 * pk->fp16_tflops; /* int8 GEMMs: dense IMMA runs at twice the FP16 rate */
  if (dt == GPUC_DT_F16 || dt == GPUC_DT_BF16) return pk->fp16_tflops;
  if (dt == GPUC_DT_F64) return pk->fp64_tflops;
  return pk->fp32_tflops;
}

static char bound_of(double bw, double flop) {
  if (bw < 0 || flop < 0 || (bw == 0 && flop == 0)) return '-';
  return bw >= flop ? 'M' : 'C';
}

void gpuc_profile_row(const Plan *p, uint32_t i, const double *ms, const GpucPeaks *pk,
                      GpucProfileRow *r) {
  double total = 0;
  for (uint32_t k = 0; k < p->nsteps; k++) total += ms[k];
  double bytes = (double)p->costs[i].bytes, flops = (double)p->costs[i].flops, sec = ms[i] * 1e-3;
  memset(r, 0, sizeof *r);
  r->ms = ms[i];
  r->share = total > 0 ? ms[i] / total : 0;
  r->mb = bytes / 1e6;
  r->gflop = flops / 1e9;
  r->gbs = sec > 0 ? bytes / sec / 1e9 : 0;
  r->tflops = sec > 0 ? flops / sec / 1e12 : 0;
  r->peak_tflops = step_peak(p, i, pk);
  r->bw_frac = pk->dram_gbs > 0 && sec > 0 ? r->gbs / pk->dram_gbs : -1;
  r->flop_frac = r->peak_tflops > 0 && sec > 0 ? r->tflops / r->peak_tflops : -1;
  r->bound = bound_of(r->bw_frac, r->flop_frac);
}

static void pct(FILE *f, int width, double frac) {
  if (frac < 0) fprintf(f, " %*s", width, "n/a");
  else fprintf(f, " %*.1f%%", width - 1, 100 * frac);
}

static void tflops_str(char *b, size_t n, double v) {
  if (v > 0) snprintf(b, n, "%.1f", v);
  else snprintf(b, n, "n/a");
}

void gpuc_profile_print(FILE *f, const Plan *p, const double *ms, const GpucPeaks *pk,
                        const GpucDeviceInfo *d) {
  char t32[32], t16[32], t64[32], bw[32];
  tflops_str(t32, sizeof t32, pk->fp32_tflops);
  tflops_str(t16, sizeof t16, pk->fp16_tflops);
  tflops_str(t64, sizeof t64, pk->fp64_tflops);
  if (pk->dram_gbs > 0) snprintf(bw, sizeof bw, "%.0f GB/s", pk->dram_gbs);
  else snprintf(bw, sizeof bw, "n/a");
  fprintf(f, "peaks: DRAM %s", bw);
  if (d && pk->dram_gbs > 0) fprintf(f, " (2 x %d MHz x %d bit)", d->mem_clock_khz / 1000, d->bus_bits);
  fprintf(f, "; TFLOP/s FP32 %s, FP16 tensor %s, FP64 %s", t32, t16, t64);
  if (d && pk->fp32_tflops > 0) fprintf(f, " (%d SMs x %d MHz, sm_%d rates)", d->sms, d->clock_khz / 1000, d->sm);
  fprintf(f, "\n");
  fprintf(f, "  %-5s %-10s %9s %6s %9s %9s %8s %8s %7s %8s %s %s\n", "step", "kind", "ms", "share",
          "MB", "GFLOP", "GB/s", "TFLOP/s", "%pk BW", "%pk FLOP", "M/C", "covers");
  double total = 0, bytes = 0, flops = 0, at_peak_bw = 0, at_peak_flop = 0;
  bool flop_known = true;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const PlanStep *st = &p->steps[i];
    GpucProfileRow r;
    gpuc_profile_row(p, i, ms, pk, &r);
    fprintf(f, "  %-5u %-10s %9.4f %5.1f%% %9.3f %9.4f %8.1f %8.3f",
            i, st->kind == PLAN_STEP_KERNEL ? "kernel"
               : st->kind != PLAN_STEP_GEMM ? "cudnn"
               : (p->gemms[st->index].flags & PLAN_GEMM_F_SPARSE24) ? "gemm2:4"
               : p->gemms[st->index].compute == PLAN_GEMM_COMPUTE_I32 ? "lt-int8"
               : "cublasLt",
            r.ms, 100 * r.share, r.mb, r.gflop, r.gbs, r.tflops);
    pct(f, 7, r.bw_frac);
    pct(f, 8, r.flop_frac);
    fprintf(f, "  %c  %s\n", r.bound, gpuc_plan_str(p, st->nodes));
    total += ms[i];
    bytes += (double)p->costs[i].bytes;
    flops += (double)p->costs[i].flops;
    if (p->costs[i].flops) {
      if (r.peak_tflops > 0) at_peak_flop += (double)p->costs[i].flops / (r.peak_tflops * 1e12);
      else flop_known = false;
    }
  }
  /* fractions of the whole: time all steps would take at the peaks over
   * the time they took (steps of different math have different peaks) */
  double sec = total * 1e-3;
  at_peak_bw = pk->dram_gbs > 0 ? bytes / (pk->dram_gbs * 1e9) : -1;
  double bw_frac = at_peak_bw >= 0 && sec > 0 ? at_peak_bw / sec : -1;
  double flop_frac = flop_known && sec > 0 ? at_peak_flop / sec : -1;
  fprintf(f, "  %-5s %-10s %9.4f %5.1f%% %9.3f %9.4f %8.1f %8.3f", "total", "", total,
          total > 0 ? 100.0 : 0.0, bytes / 1e6, flops / 1e9, sec > 0 ? bytes / sec / 1e9 : 0,
          sec > 0 ? flops / sec / 1e12 : 0);
  pct(f, 7, bw_frac);
  pct(f, 8, flop_frac);
  fprintf(f, "  %c\n", bound_of(bw_frac, flop_frac));
}
