// Row-paired float weights (DType::kF32Pairs, kF16Pairs, kBF16Pairs): the layout the CPU backend
// gives a Linear weight at load time when the AVX-512 GEMM will read it.
//
// Layout of an [n, k] matrix (k a multiple of 8): rows 2p and 2p + 1 are interleaved 8 elements at
// a time (8 of row 2p, then the same 8 of row 2p + 1, then the next 8 of each), in the 2k elements
// the two rows take in row-major order; an odd last row stays as it is. So every pair starts where
// its first row starts in row-major order; the same elements, the same bytes, nothing padded.
//
// Why: the AVX-512 GEMM tile (dot_tile_avx512.cc) holds a pair of weight rows' 8 + 8 elements in
// one 512-bit register. From row-major rows that takes two 256-bit loads and an insert (a
// shuffle-port instruction competing with the FMAs), and the checkpoint's tensors start at 56 mod
// 64 bytes, so half the loads split cache lines; from a pair it is one aligned 64-byte load. Pairs
// rather than wider panels (6 rows interleaved, tried first) so that a tile still reads several
// streams at once: a single stream per 6 rows ran 10-35% slower from DRAM (decode, batch 8), the
// hardware prefetcher restarting at every 4 KiB page of the one stream
// (benchmarks/results/2026-11-25-cpu-weight-pairs.md).
//
// Thread-safe: pure functions of their arguments.
#ifndef BLOSSOM_KERNELS_CPU_WEIGHT_PAIRS_H_
#define BLOSSOM_KERNELS_CPU_WEIGHT_PAIRS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace blossom {

// True if an [n, k] matrix of `dtype` can be row-paired: a float dtype, k a positive multiple of
// 8, n positive.
inline bool CanPackPairs(DType dtype, int64_t n, int64_t k) {
  return IsFloat(dtype) && n > 0 && k > 0 && k % 8 == 0;
}

// Index, in elements from the matrix's start, of element i of row c.
inline int64_t PairElementIndex(int64_t n, int64_t k, int64_t c, int64_t i) {
  const int64_t first = c & ~int64_t{1};
  if (first + 1 >= n) return c * k + i;  // the odd last row
  return first * k + (i / 8) * 16 + (c & 1) * 8 + i % 8;
}

// Packs rows [row_begin, row_end) of the row-major [n, k] matrix `rows` (element dtype `dtype`)
// into their places in `packed` (the whole packed matrix). row_begin and row_end are even or n,
// so that disjoint ranges can be packed concurrently.
void PackPairRows(const void* rows, DType dtype, int64_t n, int64_t k, int64_t row_begin,
                  int64_t row_end, void* packed);

// The inverse for `count` rows from row c0: writes them row-major ([count, k]) to `out`.
void UnpackPairRows(const void* packed, DType dtype, int64_t n, int64_t k, int64_t c0,
                    int64_t count, void* out);

// Row c of a row-paired [n, k] matrix of element dtype `dtype`, widened to fp32 (an embedding
// lookup in a table that is also the LM head).
void PairedRowToF32(const void* packed, DType dtype, int64_t n, int64_t k, int64_t c, float* out);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_WEIGHT_PAIRS_H_
