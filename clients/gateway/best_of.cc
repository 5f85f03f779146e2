#include "clients/gateway/best_of.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace blossom::gateway {

double MeanTokenLogprob(const blossom::v1::GenerateResponse& response) {
  if (response.tokens_size() == 0) return -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (const blossom::v1::Token& token : response.tokens()) sum += token.logprob();
  // NaN (never sent by the server; a comparison with it would break the sort) ranks last.
  if (std::isnan(sum)) return -std::numeric_limits<double>::infinity();
  return sum / response.tokens_size();
}

std::vector<size_t> RankByMeanLogprob(const std::vector<blossom::v1::GenerateResponse>& responses,
                                      size_t begin, size_t count) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), begin);
  std::vector<double> mean(responses.size(), 0.0);
  for (size_t i : order) mean[i] = MeanTokenLogprob(responses[i]);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return mean[a] > mean[b]; });
  return order;
}

}  // namespace blossom::gateway
