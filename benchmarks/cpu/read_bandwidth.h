// The read bandwidth behind cpu-step-bench's decode floor (decode_read_bytes / it): threads that
// each sum a disjoint part of a buffer with the widest loads this CPU has, as the kernels read
// weights (AVX-512, else AVX2, else 64-bit scalar). Narrower loads understate what a core can
// pull: on a 2-vCPU Xeon without AMX (2026-11-29) 8-byte loads read 19.5 GB/s over 1 GiB where
// 64-byte loads read 26.1 in the same minute (1.34x).
//
// Thread-safety: free functions; ReadBandwidthGbs starts and joins its own threads.
#ifndef BLOSSOM_BENCHMARKS_CPU_READ_BANDWIDTH_H_
#define BLOSSOM_BENCHMARKS_CPU_READ_BANDWIDTH_H_

#include <cstddef>
#include <cstdint>

namespace blossom {

enum class ReadWidth { kScalar, kAvx2, kAvx512 };

// The widest loads this CPU runs (scalar off x86-64).
ReadWidth WidestReadWidth();
const char* ReadWidthName(ReadWidth width);

// The sum (mod 2^64) of [begin, end) read with `width`'s loads; `width` must be supported (see
// WidestReadWidth). The sum keeps the reads from being optimized away, and lets tests check that
// every word was read once.
uint64_t SumWords(const uint64_t* begin, const uint64_t* end, ReadWidth width);

// Bytes read per second (1e9) by `threads` threads summing disjoint parts of a `bytes` buffer
// with the widest loads: the best of `repetitions` passes, after the buffer was written once.
double ReadBandwidthGbs(size_t bytes, int threads, int repetitions = 5);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_CPU_READ_BANDWIDTH_H_
