/* The plan file: the only thing the runtime shares with the compiler.
 *
 * Layout (all integers little-endian, every struct fixed-size, no pointers):
 *   PlanHeader                      64 bytes
 *   PlanSection[nsections]          16 bytes each
 *   section payloads                each at an offset aligned to 256
 * The checksum is FNV-1a 64 over the whole file with the checksum field
 * zeroed. A loader checks magic, format version, size, checksum, then every
 * section's bounds, every struct's indices and every tensor's extent
 * before any of it is used; nothing in a plan is ever executed on the host.
 *
 * Tensors live in one of three memories: the activation arena (offsets
 * planned by the compiler), the weights blob (uploaded once), or nowhere
 * (an alias of another tensor: same bytes, other shape — Reshape). */
#ifndef GPUC_PLAN_H
#define GPUC_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "ir.h"

#define GPUC_PLAN_MAGIC "GPUCPLAN"
/* 2: the COSTS section (bytes and FLOPs per step)
 * 3: the TUNE section (what -O3 may change per step); a format-2 plan is
 *    still read, every step fixed as compiled
 * 4: PlanGemm names each operand's dtype and the compute type (int8 GEMMs)
 *    and carries flags (PLAN_GEMM_F_*: 2:4 sparse weights); format 2 and 3
 *    GEMMs are read as float GEMMs of their one dtype, flags 0;
 *    PlanGemm.trans_a carries an epilogue activation (GPUC_GEMM_EPI)
 * 5: bucket plans (AXES, BUCKETS, DIMUSE, BUCKET_PLANS sections, all
 *    empty in a one-shape plan): one specialization per shape bucket,
 *    weights stored once; format 2-4 plans are read as one-shape plans
 * 6: PlanGemm carries cuSPARSELt's configuration for a 2:4 GEMM as -O3's
 *    search chose it (PLAN_GEMM_F_SPARSE_CFG, sparse_cfg); format 4-5
 *    GEMM records are read without one (their 2:4 GEMMs run cuSPARSELt's
 *    default configuration; a session says so and how to search)
 * 7: the TMAPS section (PlanTensorMap: TMA descriptors a kernel step takes
 *    after its tensor arguments; the int8 GEMM's GPUC_INT8_WS=tma loads);
 *    format 2-6 plans are read with none */
#define GPUC_PLAN_FORMAT_VERSION 7u
#define GPUC_PLAN_FORMAT_OLDEST 2u
#define GPUC_PLAN_ALIGN 256u

typedef struct PlanHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_size;          /* sizeof(PlanHeader) */
  char gpuc_version[16];         /* NUL-padded */
  uint32_t sm;                   /* target arch, e.g. 90 for sm_90 */
  uint32_t nsections;
  uint64_t file_size;
  uint64_t checksum;
  uint32_t flags;                /* GPUC_PLAN_F_* */
  uint32_t reserved;
} PlanHeader;

/* how the plan was compiled (informational: a reader ignores bits it does
 * not know) */
enum { GPUC_PLAN_F_FP16 = 1u << 0, GPUC_PLAN_F_BF16 = 1u << 1 };
/* not informational: a bucket's schedule inside a bucket plan, whose
 * weight tensors index the container's weights (its own WEIGHTS section is
 * empty); a plan file on its own never has it */
enum { GPUC_PLAN_F_BUCKET = 1u << 2 };
/* not informational: the module was compiled for sm_XXa (Hopper's wgmma in
 * the int8 GEMM, codegen/lower_int8_gemm.c): its CUBIN and PTX run on
 * exactly sm_XX, never JIT-compiled for a newer GPU */
enum { GPUC_PLAN_F_ARCH_SPECIFIC = 1u << 3 };

typedef enum PlanSectionId {
  PLAN_SEC_META = 1,     /* PlanMeta */
  PLAN_SEC_STRINGS,      /* NUL-terminated strings; offsets index here */
  PLAN_SEC_TENSORS,      /* PlanTensor[] */
  PLAN_SEC_KERNELS,      /* PlanKernel[]: functions of the one module */
  PLAN_SEC_STEPS,        /* PlanStep[]: the launch schedule, in order */
  PLAN_SEC_ARGS,         /* uint32_t[]: tensor indices of kernel arguments */
  PLAN_SEC_GEMMS,        /* PlanGemm[] */
  PLAN_SEC_CONVS,        /* PlanConv[] */
  PLAN_SEC_WEIGHTS,      /* raw bytes of constant tensors */
  PLAN_SEC_PTX,          /* NUL-terminated PTX of the module (JIT fallback) */
  PLAN_SEC_CUBIN,        /* CUBIN of the module for header.sm */
  PLAN_SEC_COSTS,        /* PlanCost[nsteps]: what each step moves and computes */
  PLAN_SEC_TUNE,         /* PlanTune[nsteps]: what -O3 may change per step (format 3) */
  PLAN_SEC_AXES,         /* PlanAxis[]: the ranged dims of a bucket plan (format 5) */
  PLAN_SEC_BUCKETS,      /* PlanBucket[]: one specialization per bucket (format 5) */
  PLAN_SEC_DIMUSE,       /* PlanDimUse[]: which input/output dims follow which axis (format 5) */
  PLAN_SEC_BUCKET_PLANS, /* the buckets' plan images, each a whole plan without weights (format 5) */
  PLAN_SEC_TMAPS,        /* PlanTensorMap[]: kernel steps' TMA descriptors (format 7) */
  PLAN_SEC_COUNT_
} PlanSectionId;

typedef struct PlanSection {
  uint32_t id;
  uint32_t reserved;
  uint64_t offset;
  uint64_t size;
} PlanSection;

typedef struct PlanMeta {
  uint64_t arena_bytes;          /* activations */
  uint64_t workspace_bytes;      /* library-call scratch, shared by steps */
  uint64_t naive_bytes;          /* sum of all activations, for the report */
  uint64_t weight_bytes;
  uint32_t ninputs, noutputs;
  uint32_t nnodes_onnx;          /* nodes in the model as imported */
  uint32_t nnodes_lowered;       /* nodes after passes */
  int64_t batch;                 /* leading dim of the first input, for items/s */
} PlanMeta;

enum { PLAN_MEM_ARENA = 0, PLAN_MEM_WEIGHTS = 1, PLAN_MEM_ALIAS = 2 };
enum { PLAN_ROLE_INTERNAL = 0, PLAN_ROLE_INPUT = 1, PLAN_ROLE_OUTPUT = 2, PLAN_ROLE_CONST = 3,
       PLAN_ROLE_INPUT_OUTPUT = 4 };

typedef struct PlanTensor {
  uint32_t name;                 /* string offset */
  uint8_t dt;                    /* GpucDType */
  uint8_t rank;
  uint8_t mem;                   /* PLAN_MEM_* */
  uint8_t role;                  /* PLAN_ROLE_* */
  int64_t dims[GPUC_MAX_RANK];
  uint64_t offset;               /* in arena or weights; alias: tensor index */
  uint64_t bytes;
} PlanTensor;

typedef struct PlanKernel {
  uint32_t name;                 /* string: extern "C" function name */
  uint32_t reserved;
} PlanKernel;

enum { PLAN_STEP_KERNEL = 1, PLAN_STEP_GEMM = 2, PLAN_STEP_CONV = 3 };

typedef struct PlanStep {
  uint32_t kind;                 /* PLAN_STEP_* */
  uint32_t index;                /* kernel, gemm or conv index */
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shmem;
  uint32_t args;                 /* first index in ARGS */
  uint32_t nargs;
  uint32_t nodes;                /* string: ONNX node names this step covers */
} PlanStep;

/* A TMA descriptor (CUtensorMap) kernel step `step` takes by value after
 * its tensor arguments, in record order (records sorted by step; at most
 * GPUC_PLAN_TMAPS_PER_STEP a step): a 2-D tiled map over the bytes of
 * tensor `tensor` (one of the step's arguments, so the arena planner saw
 * it read): dims[0] bytes a row (contiguous), dims[1] rows, row_stride
 * bytes apart (a multiple of 16, >= dims[0]); a load moves a box of
 * box[0] bytes (16..128, a multiple of 16) x box[1] rows (1..256) into
 * shared memory in the 128-byte swizzle (PLAN_TMAP_SWIZZLE_128B: 16-byte
 * chunk c of box row r lands at chunk c ^ (r % 8)); bytes outside the
 * tensor read as zeros. A session encodes it (cuTensorMapEncodeTiled,
 * UINT8 elements) from the tensor's device address at each launch, so a
 * graph captured with tensors elsewhere (zero-copy bindings, buckets)
 * gets maps of where they are. The reader checks every field. */
enum { PLAN_TMAP_SWIZZLE_128B = 3 };
#define GPUC_PLAN_TMAPS_PER_STEP 4
typedef struct PlanTensorMap {
  uint32_t step;                 /* a kernel step */
  uint32_t tensor;               /* among the step's arguments */
  uint64_t dims[2];              /* bytes a row, rows */
  uint64_t row_stride;           /* bytes */
  uint32_t box[2];               /* bytes, rows */
  uint32_t swizzle;              /* PLAN_TMAP_SWIZZLE_128B */
  uint32_t reserved;             /* 0 */
} PlanTensorMap;

/* Y[b] = alpha * op(A[b]) op(B[b]) + beta * C[b], row-major, batched with
 * strides (0 = broadcast). Row-major is mapped onto cuBLASLt's column
 * major by computing Y^T = op(B)^T op(A)^T. C may be -1 (no addend); C's
 * row stride ldc may be 0 (a bias row broadcast over M), after which
 * cuBLASLt may apply an activation (format 4: GPUC_GEMM_EPI(trans_a)).
 *
 * Dtypes (format 4): a_dt, b_dt, y_dt are the operands' and `compute` the
 * math (PLAN_GEMM_COMPUTE_*):
 *   FLOAT: a_dt == b_dt == y_dt == dt, one of f32 f16 bf16 f64; fp32
 *          accumulation (f64 for f64).
 *   I32:   int8 x int8 -> int32 on tensor cores (IMMA): a_dt = b_dt = i8,
 *          y_dt = i32, dt = i8; alpha 1, beta 0, no C, batch 1; A [M,K]
 *          not transposed, B stored [N,K] and transposed (cuBLASLt's "TN",
 *          the only order its IMMA kernels take); K, N, lda, ldb and ldy
 *          multiples of 4 (the reader refuses anything else).
 *   F8:    --fp8: e4m3 x e4m3 on FP8 tensor cores (sm_89+), f32 sums:
 *          a_dt = b_dt = dt = f8e4m3, y_dt f32/f16/bf16; A [M,K] not
 *          transposed, B [N,K] transposed ("TN"), batch 1, alpha 1; K, N,
 *          lda, ldb multiples of 16. Y = (A B^T) * sa[m] * sb[n] (+ c[n]):
 *          the scales are f32 tensors whose indices stand in stride_a (sa,
 *          M values, per row of A) and stride_b (sb, N values, per row of
 *          B), unused as strides at batch 1; cuBLASLt applies them in its
 *          outer-vector scale mode. c, if any, is a bias row (ldc 0) of
 *          y_dt, added in the epilogue.
 * flags: PLAN_GEMM_F_*. */
typedef struct PlanGemm {
  uint32_t a, b, c, y;           /* tensor indices; c = UINT32_MAX if none */
  uint32_t trans_a, trans_b;     /* trans_a: bit 0 transposes A, bits 8..15 the epilogue */
  int64_t m, n, k, batch;
  int64_t lda, ldb, ldc, ldy;
  int64_t stride_a, stride_b, stride_c, stride_y;
  float alpha, beta;
  uint32_t dt;                   /* GpucDType of A, B, Y */
  uint32_t algo_index;           /* which of cuBLASLt's heuristic results to run: 0 its first
                                    choice (-O2); -O3 stores the one it timed fastest (the
                                    load falls back to 0 when the list is shorter there) */
  /* format 4 (a format 2/3 record ends here: a_dt = b_dt = y_dt = dt, FLOAT) */
  uint32_t a_dt, b_dt, y_dt;     /* GpucDType of each operand */
  uint32_t compute;              /* PLAN_GEMM_COMPUTE_* */
  uint32_t flags;                /* PLAN_GEMM_F_* */
  uint32_t reserved;             /* 0; with PLAN_GEMM_F_BIAS_C the bias row's tensor */
  /* format 6 (a format 4/5 record ends here: zeros, no flag) */
  int32_t sparse_cfg[4];         /* PLAN_GEMM_F_SPARSE_CFG: cuSPARSELt's CUSPARSELT_MATMUL_ALG_CONFIG_ID,
                                    SPLIT_K, SPLIT_K_MODE, SPLIT_K_BUFFERS as its search on the
                                    tuning GPU chose them; else 0 */
} PlanGemm;
enum { PLAN_GEMM_COMPUTE_FLOAT = 0, PLAN_GEMM_COMPUTE_I32 = 1, PLAN_GEMM_COMPUTE_F8 = 2 };
/* PlanGemm.flags:
 *   PLAN_GEMM_F_SPARSE24: B is a constant weight (PLAN_MEM_WEIGHTS, 2-D,
 *     [K,N], or [N,K] with trans_b) with at most 2 nonzeros in every group
 *     of 4 along K (--prune 2:4); half, batch 1, A not transposed and no
 *     epilogue activation, no C other than a bias row, m, n and k multiples
 *     of 16. A session runs it on sparse tensor cores through cuSPARSELt
 *     where the library and the GPU (sm_80+) have them, compressing B at
 *     load (the compressed layout belongs to the library version); else
 *     cuBLASLt runs it dense, zeros and all. The reader checks the
 *     weight's pattern. */
/*   PLAN_GEMM_F_BIAS_C: Y = A B + beta C + bias: c is a full [M,N]
 *     matrix (ldc >= n; the residual a transformer adds after its
 *     projection, passes/fuse_residual_gemm.c) and `reserved` holds the
 *     bias row's tensor index (N values of dt); float compute, batch 1, no
 *     epilogue activation (cuBLASLt would apply it after C is added). */
/*   PLAN_GEMM_F_SPARSE_CFG (format 6, only with SPARSE24): sparse_cfg
 *     holds the configuration -O3's cusparseLtMatmulSearch chose on the
 *     GPU it tuned on (config id 0..4095, split-K 1..64, its mode 0..2 and
 *     buffers 0..64, the reader checks); a session sets it before its
 *     cuSPARSELt plan is made, and falls back to the default
 *     configuration (with a note) where its cuSPARSELt refuses it. */
enum { PLAN_GEMM_F_SPARSE24 = 1u << 0, PLAN_GEMM_F_BIAS_C = 1u << 1, PLAN_GEMM_F_SPARSE_CFG = 1u << 2 };
#define PLAN_GEMM_F_KNOWN (PLAN_GEMM_F_SPARSE24 | PLAN_GEMM_F_BIAS_C | PLAN_GEMM_F_SPARSE_CFG)
/* The size of a format 2/3 GEMM record: the fields before a_dt. */
#define PLAN_GEMM_V3_SIZE offsetof(PlanGemm, a_dt)
/* The size of a format 4/5 GEMM record: the fields before sparse_cfg. */
#define PLAN_GEMM_V5_SIZE offsetof(PlanGemm, sparse_cfg)
/* Fills a_dt, b_dt, y_dt from dt when they are unset (GPUC_DT_UNDEF): a
 * float GEMM described by its one dtype, as lowerings and old plans do. */
void gpuc_plan_gemm_defaults(PlanGemm *g);
/* PlanGemm.trans_a: whether A is transposed, and the activation cuBLASLt
 * applies after the bias row (RELU_BIAS, GELU_BIAS: its GELU is the tanh
 * approximation; passes/fuse_gemm_act.c says when that may stand for the
 * erf form). An epilogue needs the bias row (c set, ldc 0). */
enum { GPUC_GEMM_EPI_NONE = 0, GPUC_GEMM_EPI_RELU = 1, GPUC_GEMM_EPI_GELU = 2 };
#define GPUC_GEMM_TRANS_A(f) ((uint32_t)(f) & 1u)
#define GPUC_GEMM_EPI(f) (((uint32_t)(f) >> 8) & 0xffu)
#define GPUC_GEMM_TRANS_A_PACK(trans, epi) ((uint32_t)(trans) | ((uint32_t)(epi) << 8))
#define GPUC_GEMM_TUNE_MAX 8     /* heuristic results -O3 times per GEMM */

/* cuDNN convolution, NCHW, 1-3 spatial dims (1-D is run as 2-D), or NHWC
 * (2-D forward only). x, w, y always name the forward convolution's
 * tensors (X [N,C,..], W [K,C/g,..], Y [N,K,..]); mode says which one the
 * step computes:
 *   PLAN_CONV_FWD (0):        y = act(conv(x, w) + b + z), b and z
 *                             optional; with b present one fused call
 *   PLAN_CONV_BWD_DATA (1):   x = dX from w and y = dY (no b, z, act)
 *   PLAN_CONV_BWD_FILTER (2): w = dW from x and y = dY (no b, z, act)
 * `act` packs two fields (the loader refuses other bits and values):
 *   bits 0-7   activation: 0 none, 1 relu
 *   bits 8-15  layout: GPUC_LAYOUT_NCHW (0), or GPUC_LAYOUT_NHWC (1) with
 *              x, z, y [N,H,W,C] and w [K,R,S,C/groups] (b is [K] in both) */
#define GPUC_CONV_ACT(a) ((uint32_t)(a) & 0xffu)
#define GPUC_CONV_LAYOUT(a) (((uint32_t)(a) >> 8) & 0xffu)
#define GPUC_CONV_ACT_PACK(act, layout) ((uint32_t)(act) | ((uint32_t)(layout) << 8))
typedef struct PlanConv {
  uint32_t x, w, b, y;           /* b = UINT32_MAX if no bias */
  uint32_t z;                    /* residual, UINT32_MAX if none */
  uint32_t act;                  /* activation | layout << 8 (above) */
  uint32_t nspatial;             /* 2 or 3 */
  uint32_t groups;
  int32_t pads[3], strides[3], dilations[3];
  uint32_t dt;
  int32_t algo;                  /* cuDNN algorithm of the mode, -1 = choose at load; -O3
                                    stores the forward algorithm it timed fastest (a GPU that
                                    rejects it falls back to the heuristic) */
  uint32_t mode;                 /* PLAN_CONV_*; was a zero `reserved` before */
  uint64_t workspace;            /* bytes needed by algo */
} PlanConv;

enum { PLAN_CONV_FWD = 0, PLAN_CONV_BWD_DATA = 1, PLAN_CONV_BWD_FILTER = 2 };

/* What a step costs, counted from the IR at compile time (codegen/cost.c):
 * bytes = the distinct tensors the step reads and writes, each once in
 * full; flops = exact for GEMMs (2*M*N*K*batch) and convolutions, an
 * estimate per op for generated kernels. For reports (gpuc inspect, bench
 * --profile); nothing executes on them. */
typedef struct PlanCost {
  uint64_t bytes;
  uint64_t flops;
} PlanCost;

/* What -O3 (runtime/gpu/autotune.c) may change in a step without a
 * recompile, as codegen proved it safe (codegen/builder.c,
 * cg_launch_items). One record per step; library calls' records are zero.
 *   PLAN_TUNE_F_BLOCK_FREE: the kernel is one grid-stride loop over
 *     `items` independent items, so any block size computes the same bytes;
 *     the step is 1-D, without shared memory, and its grid is always
 *     gpuc_plan_items_grid(items, block[0]) (the reader checks it).
 *   PLAN_TUNE_F_BLOCK_TUNED: -O3 timed the block sizes on a GPU and chose
 *     block[0] (only with BLOCK_FREE).
 * src_hash (FNV-1a 64 of the kernel's source, its name left out) names the
 * kernel across models for the tune cache. Later choices that need a
 * recompile (tile sizes) get a flag bit and use `choice`, 0 until then. */
/* PLAN_TUNE_F_TENSOR_MATH (any kernel step): the kernel's math runs on
 * tensor cores (mma.sync on half/bf16): `gpuc bench --profile` compares its
 * FLOPs with the FP16 tensor peak instead of the FP32 one. */
enum { PLAN_TUNE_F_BLOCK_FREE = 1u << 0, PLAN_TUNE_F_BLOCK_TUNED = 1u << 1, PLAN_TUNE_F_TENSOR_MATH = 1u << 2 };
#define PLAN_TUNE_F_KNOWN (PLAN_TUNE_F_BLOCK_FREE | PLAN_TUNE_F_BLOCK_TUNED | PLAN_TUNE_F_TENSOR_MATH)
#define GPUC_ITEMS_BLOCK 256u              /* the block codegen launches items kernels with */
#define GPUC_ITEMS_MAX_BLOCKS (65535u * 32u) /* grid cap: the kernels loop grid-stride past it */
typedef struct PlanTune {
  uint64_t items;                /* BLOCK_FREE: the loop's item count (>= 1); else 0 */
  uint64_t src_hash;             /* kernel steps; 0 for library calls */
  uint32_t flags;                /* PLAN_TUNE_F_* */
  uint32_t choice;               /* reserved for recompiled variants: 0 */
} PlanTune;

/* The grid of an items kernel: ceil(items / block), capped. */
uint32_t gpuc_plan_items_grid(uint64_t items, uint32_t block);

/* Bucket plans (format 5; docs/ARCHITECTURE.md "Shape buckets"). A plan
 * compiled for a range of shapes (`--shape x=1..64x3x224x224`) holds one
 * whole schedule per bucket (its own kernels, launch dims, library calls,
 * arena offsets), all reading one copy of the weights: the container plan
 * is the largest bucket (all axes at hi; its sections are the ordinary
 * ones, its WEIGHTS the shared blob) and every other bucket is a plan
 * image in BUCKET_PLANS, flagged GPUC_PLAN_F_BUCKET, whose weight tensors
 * index the container's weights. A session allocates one arena, the
 * largest bucket's, and picks per run the smallest bucket that holds the
 * actual shape (runtime/buckets.c). */
#define GPUC_PLAN_MAX_AXES 4
#define GPUC_PLAN_MAX_BUCKETS 1024
/* PlanAxis.flags: how a shape smaller than its bucket is padded.
 *   BATCH:  a leading dim of every input that has it: rows are independent,
 *           so the inputs are padded by repeating their last row and the
 *           outputs sliced.
 *   MASKED: a sequence dim that an attention-mask input (a name with
 *           "mask" in it) carries: inputs are padded with zeros, the mask's
 *           zeros hide the padding, the outputs are sliced.
 *   neither: no padding is safe; a shape must equal a bucket's size. */
enum { PLAN_AXIS_F_BATCH = 1u << 0, PLAN_AXIS_F_MASKED = 1u << 1 };
typedef struct PlanAxis {
  uint32_t name;                 /* string: the dim's symbol ('batch'), or 'INPUT:DIM' */
  uint32_t flags;                /* PLAN_AXIS_F_* */
  int64_t lo, hi;                /* the compiled range, 1 <= lo <= hi */
} PlanAxis;
typedef struct PlanBucket {
  int64_t size[GPUC_PLAN_MAX_AXES]; /* per axis, within its range; 0 past naxes */
  uint64_t offset, bytes;        /* its plan image in BUCKET_PLANS; bytes 0: the container itself */
} PlanBucket;
/* Input or output `name`'s dim `dim` is axis `axis`'s size in every bucket
 * (the reader checks it); dims no record names are the same in every bucket. */
typedef struct PlanDimUse {
  uint32_t name;                 /* string: an input or output */
  uint8_t dim, axis;
  uint8_t is_output;
  uint8_t reserved;              /* 0 */
} PlanDimUse;

/* In-memory plan: what the compiler builds and the loader validates. */
typedef struct Plan {
  PlanHeader hdr;
  PlanMeta meta;
  char *strings; uint64_t strings_size;
  PlanTensor *tensors; uint32_t ntensors;
  PlanKernel *kernels; uint32_t nkernels;
  PlanStep *steps; uint32_t nsteps;
  uint32_t *args; uint32_t nargs;
  PlanGemm *gemms; uint32_t ngemms;
  PlanConv *convs; uint32_t nconvs;
  PlanCost *costs; uint32_t ncosts;    /* ncosts == nsteps in a valid plan */
  PlanTune *tune; uint32_t ntune;      /* ntune == nsteps in a valid plan */
  PlanTensorMap *tmaps; uint32_t ntmaps; /* format 7; sorted by step */
  uint8_t *weights; uint64_t weights_size;
  char *ptx; uint64_t ptx_size;        /* including the NUL */
  uint8_t *cubin; uint64_t cubin_size;
  /* format 5, a bucket plan (naxes 0: one shape) */
  PlanAxis *axes; uint32_t naxes;
  PlanBucket *buckets; uint32_t nbuckets;
  PlanDimUse *dimuse; uint32_t ndimuse;
  struct Plan **bucket_plans;    /* [nbuckets]: each bucket's plan; the last is the container itself */
  bool weights_borrowed;         /* a bucket's plan: weights are the container's (not freed with it) */
} Plan;

/* The tensor whose bytes tensor t is a view of (t itself when not an
 * alias); aliases point backwards, so the walk ends. */
uint32_t gpuc_plan_base_tensor(const Plan *p, uint32_t t);

/* Write atomically (temp file + rename). */
int gpuc_plan_write(const Plan *p, const char *path, GpucErr *e);
/* Read and validate everything; on failure nothing is returned. */
Plan *gpuc_plan_read(const char *path, GpucErr *e);
/* The same two in memory (the C API's gpuc_plan_load_bytes/save_bytes):
 * the file's bytes in a new malloc'ed *out of *size bytes; a plan from
 * size bytes at data (copied), `what` naming them in messages. */
#define GPUC_PLAN_MAX_BYTES ((uint64_t)64 << 30)
int gpuc_plan_to_bytes(const Plan *p, const char *what, uint8_t **out, uint64_t *size, GpucErr *e);
Plan *gpuc_plan_from_bytes(const void *data, uint64_t size, const char *what, GpucErr *e);
void gpuc_plan_free(Plan *p);
/* Bucket i's plan (p itself for a one-shape plan or the last bucket). */
const Plan *gpuc_plan_bucket(const Plan *p, uint32_t i);
const char *gpuc_plan_str(const Plan *p, uint32_t off); /* validated on read */
/* The index of the input (output = false) or output named `name`, -1 if none. */
int gpuc_plan_io_index(const Plan *p, const char *name, bool output);
uint64_t gpuc_fnv1a64(const void *data, size_t n, uint64_t h);
#define GPUC_FNV_INIT 1469598103934665603ull
/* gpuc inspect PLAN */
void gpuc_plan_print(const Plan *p, const char *path, FILE *f);
#endif
