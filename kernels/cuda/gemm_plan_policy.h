// Host-side policy of LtGemm's plan cache, free of CUDA so that it is tested everywhere:
// which row count (M) a GEMM plan is keyed on, which row counts a warm-up must run to create
// every plan a step can use, and how measured candidate times order the algorithms.
//
// Bucketing M bounds the plans to a fixed set (a decode step's M is its batch size; a prefill
// step's, its token count) so that a warm-up can create, and time, every one of them before
// serving, and no step pays for a heuristic query or a timing run. A plan made for a bucket runs
// any M in that bucket: LtGemm sets the layouts' M per call, and an algorithm that refuses a
// smaller M falls through to the next candidate as before.
#ifndef BLOSSOM_KERNELS_CUDA_GEMM_PLAN_POLICY_H_
#define BLOSSOM_KERNELS_CUDA_GEMM_PLAN_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace blossom {

// Rows above this go to multiples of it rather than powers of two: prefill shapes are
// large enough that the heuristic's choice changes little within 256 rows, and powers of two
// would key an 8192-token step and a 4097-token one on the same plan.
constexpr int64_t kGemmRowBucketStep = 256;

// The plan's M for a GEMM of m rows (m >= 1): the next power of two up to 256
// (1, 2, 4, ..., 256), then the next multiple of 256. m <= 0 gives 1.
int64_t GemmRowBucket(int64_t m);

// Every bucket GemmRowBucket gives for 1 <= m <= max_rows, ascending: what a warm-up runs
// (1, 2, 4, ..., 256, 512, 768, ...). Empty for max_rows < 1.
std::vector<int64_t> GemmRowBuckets(int64_t max_rows);

// Candidate indices, fastest first by `millis` (the measured time of candidate i, in the
// heuristic's order). A candidate that failed to run (negative, NaN or infinite time) goes
// last; equal times, and the failed ones among themselves, keep the heuristic's order.
std::vector<int> OrderCandidatesByTime(absl::Span<const float> millis);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_GEMM_PLAN_POLICY_H_
