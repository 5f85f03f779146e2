// Vectorised fp32 arithmetic over a row of logits: exp of non-positive values, the row maximum and
// softmax weight sums. Shared by the logits processors (logits_processors.h: weights for
// temperature and the filters) and the sampler (sampler.h: the raw log-softmax of logprobs), so
// that both compute exactly the same weights for the same inputs.
//
// Header-only: these run inside per-token loops over the whole vocabulary and must inline there.
// Stateless; safe to call from any thread.
#ifndef BLOSSOM_ENGINE_SAMPLING_LOGIT_MATH_H_
#define BLOSSOM_ENGINE_SAMPLING_LOGIT_MATH_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

// GCC and Clang vector extensions give 4-wide SIMD on every target (SSE2 on x86-64, NEON on
// aarch64) without intrinsics or -ffast-math; other compilers take the scalar loops.
#if defined(__GNUC__)
#define BLOSSOM_SAMPLER_SIMD 1
#else
#define BLOSSOM_SAMPLER_SIMD 0
#endif

namespace blossom {
namespace logit_math {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Dense weights are summed per block of this many tokens; the block sums let the draw skip to
// the right block instead of walking the whole vocabulary.
constexpr size_t kBlock = 1024;

// exp(x) for x <= 0 or -inf: Cephes' single-precision expf (range reduction by ln 2, degree-6
// polynomial), max relative error ~1e-7. Branch-free so that it vectorises; the result is exactly
// 0 for x <= -126.5 ln 2 (about -87.68), where 2^n underflows the exponent field, which also
// maps -inf to 0. The scalar and vector versions perform the same operations in the same order.
constexpr float kExpFloor = -88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float ExpNonPositive(float x) {
  x = x < kExpFloor ? kExpFloor : x;
  const int32_t n = static_cast<int32_t>(x * kLog2e - 0.5f);  // round to nearest for x <= 0
  const float fn = static_cast<float>(n);
  const float r = x - fn * kLn2Hi - fn * kLn2Lo;
  float y = kP0 * r + kP1;
  y = y * r + kP2;
  y = y * r + kP3;
  y = y * r + kP4;
  y = y * r + kP5;
  y = y * r * r + r + 1.0f;
  const int32_t bits = (n + 127) << 23;  // 2^n; 0 (i.e. +0.0f) for n = -127
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

#if BLOSSOM_SAMPLER_SIMD
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

inline F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store4(float* p, F4 v) { std::memcpy(p, &v, sizeof(v)); }
inline F4 Select4(I4 mask, F4 a, F4 b) {  // mask ? a : b, lane-wise
  I4 ai, bi;
  std::memcpy(&ai, &a, sizeof(ai));
  std::memcpy(&bi, &b, sizeof(bi));
  const I4 out = (ai & mask) | (bi & ~mask);
  F4 f;
  std::memcpy(&f, &out, sizeof(f));
  return f;
}

inline F4 ExpNonPositive4(F4 x) {
  const F4 floor = {kExpFloor, kExpFloor, kExpFloor, kExpFloor};
  x = Select4(x < floor, floor, x);
  const I4 n = __builtin_convertvector(x * kLog2e - 0.5f, I4);
  const F4 fn = __builtin_convertvector(n, F4);
  const F4 r = x - fn * kLn2Hi - fn * kLn2Lo;
  F4 y = kP0 * r + kP1;
  y = y * r + kP2;
  y = y * r + kP3;
  y = y * r + kP4;
  y = y * r + kP5;
  y = y * r * r + r + 1.0f;
  const I4 bits = (n + 127) << 23;
  F4 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}
#endif

// Maximum of l[0, n); NaN-free input (the callers check it first).
inline float MaxOf(const float* l, size_t n) {
  float best = -kInf;
  size_t i = 0;
#if BLOSSOM_SAMPLER_SIMD
  F4 lanes = {-kInf, -kInf, -kInf, -kInf};
  for (; i + 4 <= n; i += 4) {
    const F4 v = Load4(l + i);
    lanes = Select4(v > lanes, v, lanes);
  }
  for (int k = 0; k < 4; ++k) best = std::max(best, lanes[k]);
#endif
  for (; i < n; ++i) best = std::max(best, l[i]);
  return best;
}

// MaxOf, and whether every value is below +inf (false for NaN and +inf; -inf is a mask) in the
// same pass.
inline float MaxOfBelowInf(const float* l, size_t n, bool* below_inf) {
  float best = -kInf;
  bool ok = true;
  size_t i = 0;
#if BLOSSOM_SAMPLER_SIMD
  F4 lanes = {-kInf, -kInf, -kInf, -kInf};
  const F4 inf = {kInf, kInf, kInf, kInf};
  I4 ok4 = {-1, -1, -1, -1};
  for (; i + 4 <= n; i += 4) {
    const F4 v = Load4(l + i);
    ok4 &= v < inf;
    lanes = Select4(v > lanes, v, lanes);
  }
  for (int k = 0; k < 4; ++k) {
    best = std::max(best, lanes[k]);
    ok = ok && ok4[k] != 0;
  }
#endif
  for (; i < n; ++i) {
    ok = ok && l[i] < kInf;
    best = std::max(best, l[i]);
  }
  *below_inf = ok;
  return best;
}

// x[i] = (l[i] - max) / temperature and w[i] = exp(x[i]) when kStore; returns the sum of the
// weights and, when block_sums is set, the sum of each kBlock-token block.
template <bool kStore>
double ExpWeights(const float* l, size_t n, float max, float temperature, float* x_out,
                  float* w_out, double* block_sums) {
  double total = 0.0;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    size_t i = start;
    double sum = 0.0;
#if BLOSSOM_SAMPLER_SIMD
    // fp32 lanes over runs of kRun tokens, folded into double: the total stays accurate to
    // ~1e-9 relative, which top_p's boundary (limit = top_p * total) depends on.
    constexpr size_t kRun = 64;
    while (i + kRun <= end) {
      F4 lanes = {0.0f, 0.0f, 0.0f, 0.0f};
      for (const size_t run_end = i + kRun; i < run_end; i += 4) {
        const F4 x = (Load4(l + i) - max) / temperature;
        const F4 w = ExpNonPositive4(x);
        if (kStore) {
          Store4(x_out + i, x);
          Store4(w_out + i, w);
        }
        lanes += w;
      }
      sum +=
          (static_cast<double>(lanes[0]) + lanes[1]) + (static_cast<double>(lanes[2]) + lanes[3]);
    }
#endif
    for (; i < end; ++i) {
      const float x = (l[i] - max) / temperature;
      const float w = ExpNonPositive(x);
      if (kStore) {
        x_out[i] = x;
        w_out[i] = w;
      }
      sum += w;
    }
    if (block_sums != nullptr) block_sums[start / kBlock] = sum;
    total += sum;
  }
  return total;
}

}  // namespace logit_math
}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_LOGIT_MATH_H_
