#include "engine/sampling/test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

namespace blossom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Mass decisions closer than this to a threshold are borderline (test_util.h).
constexpr double kMassEps = 1e-6;

}  // namespace

Reference ReferenceDistribution(const std::vector<float>& raw, const SamplingParams& p,
                                const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& output,
                                const std::vector<int32_t>& suppressed, int32_t end_token) {
  const int32_t vocab = static_cast<int32_t>(raw.size());
  Reference ref;
  // Steps 1-3.
  std::vector<float> l = raw;
  if (!p.allowed_token_ids.empty()) {
    std::set<int32_t> allowed(p.allowed_token_ids.begin(), p.allowed_token_ids.end());
    const bool guided = !p.choice_token_ids.empty() || p.constraint != nullptr;
    for (int32_t i = 0; i < vocab; ++i) {
      if (allowed.count(i) == 0 && !(guided && i == end_token)) l[i] = -kInf;
    }
  }
  if (!p.choice_token_ids.empty()) {
    std::set<int32_t> next;
    for (const std::vector<int32_t>& choice : p.choice_token_ids) {
      if (choice.size() < output.size() ||
          std::vector<int32_t>(choice.begin(), choice.begin() + output.size()) != output) {
        continue;
      }
      if (choice.size() > output.size()) next.insert(choice[output.size()]);
      else if (end_token >= 0) next.insert(end_token);
    }
    for (int32_t i = 0; i < vocab; ++i) {
      if (next.count(i) == 0) l[i] = -kInf;
    }
  }
  if (p.constraint != nullptr) {
    auto allowed = p.constraint->AllowedTokens(output, end_token);
    for (int32_t i = 0; i < vocab; ++i) {
      if (!allowed.ok() || !TokenAllowed(**allowed, i)) l[i] = -kInf;
    }
  }
  for (const std::vector<int32_t>& word : p.bad_words_token_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix <= output.size() &&
        std::vector<int32_t>(output.end() - prefix, output.end()) ==
            std::vector<int32_t>(word.begin(), word.end() - 1)) {
      l[word.back()] = -kInf;
    }
  }
  for (int32_t t : suppressed) l[t] = -kInf;
  for (const LogitBias& b : p.logit_bias) l[b.token] += b.bias;
  if (p.repetition_penalty != 1.0f) {
    std::set<int32_t> distinct(prompt.begin(), prompt.end());
    distinct.insert(output.begin(), output.end());
    for (int32_t t : distinct) {
      l[t] = l[t] > 0.0f ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  std::map<int32_t, int> counts;
  for (int32_t t : output) counts[t]++;
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& kv : counts) {
      l[kv.first] -= static_cast<float>(kv.second) * p.frequency_penalty + p.presence_penalty;
    }
  }
  std::vector<int32_t> alive;
  for (int32_t i = 0; i < vocab; ++i) {
    if (l[i] != -kInf) alive.push_back(i);
  }
  if (alive.empty()) return ref;
  // Step 4: greedy.
  if (p.temperature == 0.0f) {
    int32_t best = alive[0];
    for (int32_t i : alive) {
      if (l[i] > l[best]) best = i;
    }
    ref.probs.push_back({best, 1.0});
    return ref;
  }
  // Step 5: top_k on the processed logits keeps ties with the k-th largest value.
  if (p.top_k > 0 && p.top_k < static_cast<int32_t>(alive.size())) {
    std::vector<float> values;
    for (int32_t i : alive) values.push_back(l[i]);
    std::sort(values.begin(), values.end(), std::greater<float>());
    const float kth = values[p.top_k - 1];
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (l[i] >= kth) kept.push_back(i);
    }
    alive = kept;
  }
  // Step 4: temperature.
  float max_l = -kInf;
  for (int32_t i : alive) max_l = std::max(max_l, l[i]);
  std::vector<double> x(vocab, -std::numeric_limits<double>::infinity());
  for (int32_t i : alive) x[i] = static_cast<double>((l[i] - max_l) / p.temperature);
  // Weights below 2^-126.5 of the top token's are 0 in the sampler's fp32 exp (sampler.h).
  {
    const double underflow = -126.5 * std::log(2.0);
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (std::fabs(x[i] - underflow) < 1e-4) ref.borderline.insert(i);
      if (x[i] > underflow) kept.push_back(i);
    }
    alive = kept;
  }
  // Probabilities over ids (indexed by token; 0 elsewhere).
  auto softmax = [&x, vocab](const std::vector<int32_t>& ids) {
    double total = 0.0;
    for (int32_t i : ids) total += std::exp(x[i]);
    std::vector<double> probs(vocab, 0.0);
    for (int32_t i : ids) probs[i] = std::exp(x[i]) / total;
    return probs;
  };
  // Step 6: top_p over (x desc, id asc); keep while the mass before is < top_p.
  if (p.top_p < 1.0f) {
    const std::vector<double> probs = softmax(alive);
    std::vector<int32_t> order = alive;
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    std::vector<int32_t> kept;
    double before = 0.0;
    for (int32_t i : order) {
      if (std::fabs(before - p.top_p) <= kMassEps) ref.borderline.insert(i);
      if (before < p.top_p) kept.push_back(i);
      before += probs[i];
    }
    alive = kept;
  }
  // Step 7: typical_p as HF's TypicalLogitsWarper.
  if (p.typical_p < 1.0f) {
    const std::vector<double> probs = softmax(alive);
    double entropy = 0.0;
    for (int32_t i : alive) entropy -= probs[i] * std::log(probs[i]);
    std::vector<double> score(vocab, 0.0);
    for (int32_t i : alive) score[i] = std::fabs(-std::log(probs[i]) - entropy);
    std::vector<int32_t> order = alive;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return score[a] < score[b] || (score[a] == score[b] && a < b);
    });
    size_t last = order.size() - 1;  // when the mass is never reached
    bool reached = false;
    double cumulative = 0.0;
    double low = std::numeric_limits<double>::infinity(), high = -low;  // ambiguous thresholds
    for (size_t j = 0; j < order.size(); ++j) {
      cumulative += probs[order[j]];
      if (std::fabs(cumulative - p.typical_p) <= kMassEps) {
        low = std::min(low, score[order[j]]);
        high = std::max(high, score[order[j]]);
      }
      if (cumulative >= p.typical_p && !reached) {
        reached = true;
        last = j;
      }
    }
    const double threshold = score[order[last]];
    low = std::min(low, threshold) - 1e-6;
    high = std::max(high, threshold) + 1e-6;
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (score[i] >= low && score[i] <= high) ref.borderline.insert(i);
      if (score[i] <= threshold) kept.push_back(i);
    }
    alive = kept;
  }
  // Step 8: min_p relative to the most likely survivor.
  if (p.min_p > 0.0f) {
    const std::vector<double> probs = softmax(alive);
    double max_p = 0.0;
    for (int32_t i : alive) max_p = std::max(max_p, probs[i]);
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (std::fabs(probs[i] / max_p - p.min_p) <= 1e-6) ref.borderline.insert(i);
      if (probs[i] >= p.min_p * max_p) kept.push_back(i);
    }
    alive = kept;
  }
  const std::vector<double> probs = softmax(alive);
  std::sort(alive.begin(), alive.end());
  for (int32_t i : alive) ref.probs.push_back({i, probs[i]});
  return ref;
}

std::vector<float> RandomLogits(int32_t vocab, LogitKind kind, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, kind == LogitKind::kPeaked ? 4.0f : 1.5f);
  std::vector<float> out(vocab);
  for (float& v : out) v = normal(gen);
  if (kind == LogitKind::kQuantized) {
    // Few distinct values: many ties at every boundary.
    for (float& v : out) v = std::round(v * 2.0f) / 2.0f;
  }
  if (kind == LogitKind::kWithMasked) {
    std::uniform_int_distribution<int> coin(0, 9);
    for (int32_t i = 1; i < vocab; ++i) {
      if (coin(gen) == 0) out[i] = -kInf;  // token 0 stays finite
    }
  }
  return out;
}

std::vector<int32_t> RandomTokens(int32_t vocab, int count, uint32_t seed) {
  std::mt19937 gen(seed);
  // Draw from a small range so tokens repeat (counts > 1 exercise the frequency penalty).
  std::uniform_int_distribution<int32_t> dist(0, std::max(0, std::min(vocab - 1, 30)));
  std::vector<int32_t> out(count);
  for (int32_t& t : out) t = dist(gen);
  return out;
}

}  // namespace blossom
