#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/sampling/logit_math.h"
#include "engine/sampling/logits_processors.h"

namespace blossom {
namespace {

using logit_math::ExpWeights;
using logit_math::kBlock;
using logit_math::kInf;
using logit_math::MaxOf;

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

}  // namespace

RequestRng::RequestRng(absl::optional<uint64_t> seed)
    : seed_(seed.has_value() ? *seed : RandomSeed()), engine_(seed_) {}

double RequestRng::Uniform() {
  // The top 53 bits scaled by 2^-53: exact, and defined by the standard unlike
  // std::uniform_real_distribution, whose algorithm varies between standard libraries.
  return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
}

// Token selection and logprobs of sampler.h, with access to SamplerScratch's buffers; steps 1-8
// (penalties, temperature and the filters) are logits_processors.h's.
//
// The processors leave one of two representations: "dense" (x and w for the whole vocabulary in
// xs_/weights_, with per-block sums) when nothing was filtered, or an explicit list of surviving
// (id, x, w) in candidates_. The draw has a form for each.
class SamplerImpl {
 public:
  using Candidate = SamplerScratch::Candidate;

  static SampleResult RunRawLogprobs(absl::Span<const float> raw, int32_t token, int32_t n) {
    SampleResult r;
    r.token = token;
    Logprobs(raw, n, r);
    const float x = raw[static_cast<size_t>(token)];
    r.rank = static_cast<int32_t>(
        std::count_if(raw.begin(), raw.end(), [x](float v) { return v >= x; }));
    return r;
  }

  static absl::StatusOr<SampleResult> RunSample(absl::Span<const float> logits,
                                                const SamplingParams& params,
                                                const SamplingContext& ctx, RequestRng& rng,
                                                SamplerScratch& s) {
    SampleResult result;
    if (IsGreedy(params) && RowIsUnedited(params, ctx)) {
      absl::StatusOr<int32_t> token = UneditedGreedyToken(logits, params, ctx);
      if (!token.ok()) return token.status();
      result.token = *token;
      if (params.logprobs >= 0) Logprobs(logits, params.logprobs, result);
      return result;
    }
    absl::Status status = PrepareLogits(logits, params, ctx, s);
    if (!status.ok()) return status;
    if (IsGreedy(params)) {
      absl::StatusOr<int32_t> token = GreedyToken(s);
      if (!token.ok()) return token.status();
      result.token = *token;
    } else {
      absl::StatusOr<bool> dense = FilterLogits(params, s);
      if (!dense.ok()) return dense.status();
      // The rng moves only once the call is known to succeed.
      result.token = *dense ? DrawDense(s, rng.Uniform()) : Draw(s.candidates_, rng.Uniform());
    }
    if (params.logprobs >= 0) Logprobs(logits, params.logprobs, result);
    return result;
  }

 private:
  // Step 9 on a candidate list: inverse CDF over the survivors in their current order.
  static int32_t Draw(const std::vector<Candidate>& c, double uniform) {
    double total = 0.0;
    for (const Candidate& a : c) total += a.w;
    const double target = uniform * total;
    double cumulative = 0.0;
    for (const Candidate& a : c) {
      cumulative += a.w;
      if (cumulative > target) return a.id;
    }
    return c.back().id;  // only reachable through rounding; every survivor has w > 0
  }

  // Step 9 on the dense form: inverse CDF in token id order, skipping whole blocks by their sums.
  static int32_t DrawDense(const SamplerScratch& s, double uniform) {
    const double target = uniform * s.total_weight_;
    const float* w = s.weights_.data();
    const size_t vocab = s.weights_.size();
    double cumulative = 0.0;
    size_t block = 0;
    for (; block + 1 < s.block_sums_.size(); ++block) {
      if (cumulative + s.block_sums_[block] > target) break;
      cumulative += s.block_sums_[block];
    }
    // Within the block (the last one when rounding left the target unreached).
    const size_t begin = block * kBlock;
    const size_t end = std::min(vocab, begin + kBlock);
    int32_t last_positive = -1;
    for (size_t i = begin; i < end; ++i) {
      if (w[i] <= 0.0f) continue;
      cumulative += w[i];
      last_positive = static_cast<int32_t>(i);
      if (cumulative > target) return last_positive;
    }
    if (last_positive >= 0) return last_positive;
    for (size_t i = vocab; i-- > 0;) {  // a block without weight: rounding only
      if (w[i] > 0.0f) return static_cast<int32_t>(i);
    }
    return 0;  // unreachable: the top token has w = 1
  }

  // Log-softmax of the raw row for the chosen token and the top n alternatives.
  static void Logprobs(absl::Span<const float> raw, int32_t n, SampleResult& r) {
    const float max_logit = MaxOf(raw.data(), raw.size());
    const double sum =
        ExpWeights<false>(raw.data(), raw.size(), max_logit, 1.0f, nullptr, nullptr, nullptr);
    // (v - max) - log(sum), not v - (max + log(sum)): the latter loses log(sum) entirely when
    // |max| is large. Finite logits get finite logprobs (clamped to the lowest float), which
    // JSON can carry.
    const double log_sum = std::log(sum);
    auto logprob = [max_logit, log_sum](float v) {
      const double value = static_cast<double>(v) - static_cast<double>(max_logit) - log_sum;
      return static_cast<float>(std::max(value, -static_cast<double>(FLT_MAX)));
    };
    r.logprob = logprob(raw[r.token]);

    r.top.clear();
    if (n <= 0) return;
    // Bounded heap whose front is the worst kept entry: O(V log n), and most entries are rejected
    // by one comparison. The logprob field holds the raw logit until the end.
    auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
      return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
    };
    const size_t limit = static_cast<size_t>(n);
    r.top.reserve(limit);
    for (size_t i = 0; i < raw.size(); ++i) {
      const float v = raw[i];
      if (!(v > -kInf)) continue;
      if (r.top.size() < limit) {
        r.top.push_back({static_cast<int32_t>(i), v});
        std::push_heap(r.top.begin(), r.top.end(), better);
      } else if (v > r.top.front().logprob) {  // equal values have a higher id: worse
        std::pop_heap(r.top.begin(), r.top.end(), better);
        r.top.back() = {static_cast<int32_t>(i), v};
        std::push_heap(r.top.begin(), r.top.end(), better);
      }
    }
    std::sort_heap(r.top.begin(), r.top.end(), better);  // best first
    for (TokenLogprob& t : r.top) t.logprob = logprob(t.logprob);
  }
};

absl::StatusOr<SampleResult> Sample(absl::Span<const float> logits, const SamplingParams& params,
                                    const SamplingContext& ctx, RequestRng& rng,
                                    SamplerScratch& scratch) {
  return SamplerImpl::RunSample(logits, params, ctx, rng, scratch);
}

absl::StatusOr<SampleResult> RawLogprobs(absl::Span<const float> logits, int32_t token,
                                         int32_t top_n) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RawLogprobs: token ", token, " outside [0, ", logits.size(), ")"));
  }
  for (float v : logits) {
    if (std::isnan(v) || v == kInf) return absl::InternalError("RawLogprobs: NaN or +inf logit");
  }
  return SamplerImpl::RunRawLogprobs(logits, token, std::max(0, top_n));
}

}  // namespace blossom
