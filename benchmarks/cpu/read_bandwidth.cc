#include "benchmarks/cpu/read_bandwidth.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

uint64_t SumScalar(const uint64_t* b, const uint64_t* e) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (; b + 4 <= e; b += 4) {
    a0 += b[0];
    a1 += b[1];
    a2 += b[2];
    a3 += b[3];
  }
  for (; b < e; ++b) a0 += *b;
  return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
// Four independent accumulators of full-width loads: a cache line (or two) per iteration, as
// the GEMV kernels stream weight rows.
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint64_t* b, const uint64_t* e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (; b + 16 <= e; b += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 12)));
  }
  const __m256i sum = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + SumScalar(b, e);
}

__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint64_t* b, const uint64_t* e) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (; b + 32 <= e; b += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(b));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(b + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(b + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(b + 24));
  }
  const __m512i sum = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(sum)) + SumScalar(b, e);
}

#endif  // __x86_64__

}  // namespace

ReadWidth WidestReadWidth() {
#if defined(__x86_64__)
  if (CpuHasAvx512()) return ReadWidth::kAvx512;
  if (CpuHasAvx2Fma()) return ReadWidth::kAvx2;
#endif
  return ReadWidth::kScalar;
}

const char* ReadWidthName(ReadWidth width) {
  switch (width) {
    case ReadWidth::kAvx512: return "avx512";
    case ReadWidth::kAvx2: return "avx2";
    case ReadWidth::kScalar: break;
  }
  return "scalar";
}

uint64_t SumWords(const uint64_t* begin, const uint64_t* end, ReadWidth width) {
#if defined(__x86_64__)
  if (width == ReadWidth::kAvx512) return SumAvx512(begin, end);
  if (width == ReadWidth::kAvx2) return SumAvx2(begin, end);
#else
  (void)width;
#endif
  return SumScalar(begin, end);
}

double ReadBandwidthGbs(size_t bytes, int threads, int repetitions) {
  threads = std::max(1, threads);
  const size_t words = bytes / sizeof(uint64_t);
  if (words == 0) return 0.0;
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i) buffer[i] = i;  // touched: no page faults while timed
  const ReadWidth width = WidestReadWidth();
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < repetitions; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t b = words * t / threads, e = words * (t + 1) / threads;
        sums[t] = SumWords(buffer.data() + b, buffer.data() + e, width);
      });
    }
    for (std::thread& thread : pool) thread.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / seconds / 1e9);
  }
  // The sums go to a volatile, so no compiler may drop the reads behind them.
  volatile uint64_t sink = 0;
  for (uint64_t sum : sums) sink = sink + sum;
  return best;
}

}  // namespace blossom
