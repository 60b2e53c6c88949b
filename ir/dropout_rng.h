/* The counter-based generator of training-mode Dropout (the internal op
 * DropoutTrain, ir/ops.def), written once and used twice: the CPU
 * reference (runtime/ref/ref_train_tf.c) expands GPUC_DROPOUT_RNG as C
 * functions, and codegen (codegen/lower_train.c) emits the same macro's
 * text, GPUC_DROPOUT_RNG_SRC, into the NVRTC module as __device__
 * functions. So a mask is bit-identical on both: no state, no order, each
 * element's draw depends only on (seed, step, salt, element index).
 *
 *   key  = mix(mix(mix(seed + G) ^ step) + salt)          per node and step
 *   bits = mix(key + (i + 1) * G) >> 40                   24 bits per element
 *   keep element i  <=>  bits >= threshold = ceil(ratio * 2^24)
 *
 * mix is a 64-bit xor-shift-multiply finalizer (the splitmix64 one), G the
 * golden-ratio increment. bits / 2^24 is a uniform u in [0, 1) and "bits
 * >= ceil(ratio * 2^24)" is exactly "u >= ratio", compared in integers so
 * no float rounding can differ between host and device. A node keeps a
 * fraction (2^24 - threshold) / 2^24 of its elements, 1 - ratio within
 * 2^-24. Only unsigned long long arithmetic (wrapping), so the text means
 * the same in C and in CUDA C. */
#ifndef GPUC_DROPOUT_RNG_H
#define GPUC_DROPOUT_RNG_H
#include <math.h>
#include <stdint.h>

#define GPUC_DROPOUT_RNG(QUAL)                                                                         \
  QUAL unsigned long long gpuc_rng_mix(unsigned long long z) {                                         \
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;                                                       \
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;                                                       \
    return z ^ (z >> 31);                                                                              \
  }                                                                                                    \
  QUAL unsigned long long gpuc_dropout_key(unsigned long long seed, unsigned long long step,            \
                                           unsigned long long salt) {                                  \
    return gpuc_rng_mix(gpuc_rng_mix(gpuc_rng_mix(seed + 0x9e3779b97f4a7c15ull) ^ step) + salt);       \
  }                                                                                                    \
  QUAL unsigned int gpuc_dropout_bits(unsigned long long key, unsigned long long i) {                   \
    return (unsigned int)(gpuc_rng_mix(key + (i + 1ull) * 0x9e3779b97f4a7c15ull) >> 40);               \
  }

#define GPUC_DROPOUT_TEXT2(...) #__VA_ARGS__
#define GPUC_DROPOUT_TEXT(...) GPUC_DROPOUT_TEXT2(__VA_ARGS__)
/* The device copy, guarded so a module with several Dropout nodes defines
 * it once. */
#define GPUC_DROPOUT_RNG_SRC                                                                           \
  "#ifndef GPUC_DROPOUT_RNG_DEFINED\n#define GPUC_DROPOUT_RNG_DEFINED\n"                                \
  GPUC_DROPOUT_TEXT(GPUC_DROPOUT_RNG(static __device__ __forceinline__)) "\n#endif\n"

GPUC_DROPOUT_RNG(static inline)

#define GPUC_DROPOUT_ONE (1u << 24) /* bits are in [0, GPUC_DROPOUT_ONE) */

/* The keep threshold of a ratio in [0, 1): ceil(ratio * 2^24), at most
 * 2^24 (nothing kept when ratio is within 2^-24 of 1). */
static inline uint32_t gpuc_dropout_threshold(double ratio) {
  double t = ceil(ratio * (double)GPUC_DROPOUT_ONE);
  return t <= 0 ? 0u : t >= (double)GPUC_DROPOUT_ONE ? GPUC_DROPOUT_ONE : (uint32_t)t;
}

/* Y's factor for a kept element */
static inline double gpuc_dropout_scale(double ratio) { return 1.0 / (1.0 - ratio); }
#endif
