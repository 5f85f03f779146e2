#include "kernels/cuda/gemm_plan_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace blossom {

int64_t GemmRowBucket(int64_t m) {
  if (m <= 1) return 1;
  if (m <= kGemmRowBucketStep) {
    int64_t bucket = 1;
    while (bucket < m) bucket <<= 1;
    return bucket;
  }
  return (m + kGemmRowBucketStep - 1) / kGemmRowBucketStep * kGemmRowBucketStep;
}

std::vector<int64_t> GemmRowBuckets(int64_t max_rows) {
  std::vector<int64_t> buckets;
  if (max_rows < 1) return buckets;
  const int64_t last = GemmRowBucket(max_rows);
  for (int64_t m = 1; m <= last; m = GemmRowBucket(m + 1)) buckets.push_back(m);
  return buckets;
}

std::vector<int> OrderCandidatesByTime(absl::Span<const float> millis) {
  std::vector<int> order(millis.size());
  std::iota(order.begin(), order.end(), 0);
  auto failed = [&](int i) { return !std::isfinite(millis[i]) || millis[i] < 0.0f; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (failed(a) || failed(b)) return !failed(a) && failed(b);
    return millis[a] < millis[b];
  });
  return order;
}

}  // namespace blossom
