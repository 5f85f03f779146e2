#include "engine/sampling/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/sampling/logit_masks.h"
#include "engine/sampling/logit_math.h"

namespace blossom {
namespace {

using logit_math::ExpNonPositive;
using logit_math::ExpWeights;
using logit_math::MaxOfBelowInf;
using logit_math::kBlock;
using logit_math::kInf;
using logit_math::MaxOf;

// Below this many candidates the weighted selection just sorts the range.
constexpr size_t kSelectSortRange = 32;
// Histogram used to split the full vocabulary at a probability-mass boundary in two linear passes:
// keys (-x for top_p, the typicality score for typical_p) in [0, kKeyRange) over up to kMaxBins
// bins (1/32 nat wide for large vocabularies; fewer for small ones, where clearing the histogram
// would cost more than the passes); larger keys share the last bin.
constexpr int kMaxBins = 4096;
constexpr int kMinBins = 64;
constexpr float kKeyRange = 128.0f;

int NumBins(size_t vocab) {
  int bins = kMinBins;
  while (bins < kMaxBins && static_cast<size_t>(bins) * 16 < vocab) bins *= 2;
  return bins;
}

// Histogram bin of a non-negative key; monotone, so equal keys share a bin.
// Monotone in key, so equal keys share a bin and bins are ordered like keys.
struct Binning {
  int bins;
  float scale;  // bins / kKeyRange
  explicit Binning(int num_bins)
      : bins(num_bins), scale(static_cast<float>(num_bins) / kKeyRange) {}
  int operator()(float key) const {
    return key >= kKeyRange ? bins - 1 : static_cast<int>(key * scale);
  }
};

}  // namespace

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, const char* name, size_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status NothingToSampleError() {
  return absl::FailedPreconditionError(
      "no token can be sampled: every logit is -inf after suppression and penalties");
}

// Steps 1-8 of sampler.h, with access to SamplerScratch's buffers.
//
// Two representations: "dense" keeps x and w for the whole vocabulary in xs_/weights_ (used when
// top_k is off: vectorised, no per-token bookkeeping), "candidates" is an explicit list of
// surviving (id, x, w). Filter() ends in the dense form only when nothing was filtered.
class LogitsProcessors {
 public:
  using Candidate = SamplerScratch::Candidate;

  static absl::StatusOr<std::vector<TokenProbability>> RunDistribution(
      absl::Span<const float> logits, const SamplingParams& params, const SamplingContext& ctx,
      SamplerScratch& s) {
    absl::Status status = Prepare(logits, params, ctx, s);
    if (!status.ok()) return status;
    if (IsGreedy(params)) {
      absl::StatusOr<int32_t> token = Argmax(s);
      if (!token.ok()) return token.status();
      return std::vector<TokenProbability>{{*token, 1.0}};
    }
    absl::StatusOr<bool> dense = Filter(params, s);
    if (!dense.ok()) return dense.status();
    std::vector<TokenProbability> out;
    if (*dense) {
      double total = 0.0;
      for (float w : s.weights_) total += w;
      for (size_t i = 0; i < s.weights_.size(); ++i) {
        if (s.weights_[i] > 0.0f) out.push_back({static_cast<int32_t>(i), s.weights_[i] / total});
      }
      return out;
    }
    std::vector<Candidate>& c = s.candidates_;
    double total = 0.0;
    for (const Candidate& a : c) total += a.w;
    std::sort(c.begin(), c.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    out.reserve(c.size());
    for (const Candidate& a : c) out.push_back({a.id, a.w / total});
    return out;
  }

  // Step 1's checks of the request against the row: params valid for this vocabulary, token ids
  // in range.
  static absl::Status CheckRequest(absl::Span<const float> logits, const SamplingParams& params,
                                   const SamplingContext& ctx) {
    const size_t vocab = logits.size();
    if (vocab == 0) return absl::InvalidArgumentError("logits must not be empty");
    if (vocab > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError("logits row is larger than the int32 token id range");
    }
    absl::Status status = Validate(params, static_cast<int32_t>(vocab));
    if (!status.ok()) return status;
    if (!(status = CheckTokenIds(ctx.prompt_tokens, "prompt_tokens", vocab)).ok()) return status;
    if (!(status = CheckTokenIds(ctx.output_tokens, "output_tokens", vocab)).ok()) return status;
    return CheckTokenIds(ctx.suppressed_tokens, "suppressed_tokens", vocab);
  }

  // The error for a row holding NaN or +inf, naming the first such position.
  static absl::Status NonFinite(absl::Span<const float> logits) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!(logits[i] < kInf)) {
        return absl::InternalError(absl::StrCat("logits[", i, "] is ", logits[i],
                                                ": the model produced a non-finite logit"));
      }
    }
    return absl::InternalError("the model produced a non-finite logit");
  }

  // Steps 1-4 for a greedy request whose row nothing edits (no suppressed tokens, no penalties):
  // the same checks and token as Prepare then Argmax, without copying the row (1 MiB at BLOOM's
  // vocabulary, per row and step).
  static absl::StatusOr<int32_t> UneditedArgmax(absl::Span<const float> logits,
                                                const SamplingParams& params,
                                                const SamplingContext& ctx) {
    absl::Status status = CheckRequest(logits, params, ctx);
    if (!status.ok()) return status;
    bool below_inf = true;
    const float best_value = MaxOfBelowInf(logits.data(), logits.size(), &below_inf);
    if (!below_inf) return NonFinite(logits);
    if (best_value == -kInf) return NothingToSampleError();
    return static_cast<int32_t>(std::find(logits.begin(), logits.end(), best_value) -
                                logits.begin());
  }

  // Step 1's masks (logit_masks.h) on the scratch's row and buffers.
  static void MaskToChoices(const SamplingParams& params, const SamplingContext& ctx,
                            SamplerScratch& s) {
    MaskToChoiceTokens(params.choice_token_ids, ctx.output_tokens, ctx.end_token,
                       absl::MakeSpan(s.logits_), s.choice_next_, s.seen_);
  }
  static void MaskAllBut(absl::Span<const int32_t> kept, SamplerScratch& s) {
    MaskAllTokensBut(kept, absl::MakeSpan(s.logits_), s.seen_);
  }
  static void MaskToBitmask(const TokenBitmask& allowed, SamplerScratch& s) {
    MaskToAllowedBits(allowed, absl::MakeSpan(s.logits_));
  }

  // Steps 1-3: copies the row into s.logits_, checks it and applies suppression and penalties.
  static absl::Status Prepare(absl::Span<const float> logits, const SamplingParams& params,
                              const SamplingContext& ctx, SamplerScratch& s) {
    absl::Status status = CheckRequest(logits, params, ctx);
    if (!status.ok()) return status;
    const size_t vocab = logits.size();
    s.logits_.resize(vocab);
    float* l = s.logits_.data();
    // A branch-free flag keeps the copy loop cheap; the position is only searched for on the
    // error path. "!(v < inf)" is true for NaN and +inf; -inf is a legitimate mask.
    bool bad = false;
    for (size_t i = 0; i < vocab; ++i) {
      const float v = logits[i];
      bad |= !(v < kInf);
      l[i] = v;
    }
    if (bad) return NonFinite(logits);

    if (!params.allowed_token_ids.empty()) {
      MaskAllBut(params.allowed_token_ids, s);
      // A guided output ends with the end token, whatever the allowed set says: otherwise a
      // complete choice or JSON text could never end (every token masked).
      const bool guided = !params.choice_token_ids.empty() || params.constraint != nullptr;
      if (guided && ctx.end_token >= 0 && static_cast<size_t>(ctx.end_token) < vocab) {
        l[ctx.end_token] = logits[ctx.end_token];
      }
    }
    if (!params.choice_token_ids.empty()) MaskToChoices(params, ctx, s);
    if (params.constraint != nullptr) {
      absl::StatusOr<std::shared_ptr<const TokenBitmask>> allowed =
          params.constraint->AllowedTokens(ctx.output_tokens, ctx.end_token);
      if (!allowed.ok()) return allowed.status();
      MaskToBitmask(**allowed, s);
    }
    if (!params.bad_words_token_ids.empty()) {
      std::vector<int32_t>& banned = s.choice_next_;  // free again after the choice mask
      banned.clear();
      AddBadWordBans(params.bad_words_token_ids, ctx.output_tokens, &banned);
      for (int32_t t : banned) l[t] = -kInf;
    }
    for (int32_t t : ctx.suppressed_tokens) l[t] = -kInf;
    for (const LogitBias& b : params.logit_bias) l[b.token] += b.bias;  // -inf stays -inf

    if (params.repetition_penalty != 1.0f) {
      // Each distinct token once, whether it occurs in the prompt, the output or both (HF).
      s.seen_.resize(vocab);  // new entries are zero; old ones were reset by the previous call
      const float penalty = params.repetition_penalty;
      auto penalise = [&](absl::Span<const int32_t> tokens) {
        for (int32_t t : tokens) {
          if (s.seen_[t]) continue;
          s.seen_[t] = 1;
          // Dividing by a tiny penalty can overflow; the clamp keeps the row free of +inf.
          l[t] = l[t] > 0.0f ? std::min(l[t] / penalty, std::numeric_limits<float>::max())
                             : l[t] * penalty;
        }
      };
      penalise(ctx.prompt_tokens);
      penalise(ctx.output_tokens);
      for (int32_t t : ctx.prompt_tokens) s.seen_[t] = 0;
      for (int32_t t : ctx.output_tokens) s.seen_[t] = 0;
    }

    if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
      s.counts_.resize(vocab);
      for (int32_t t : ctx.output_tokens) ++s.counts_[t];
      for (int32_t t : ctx.output_tokens) {
        const int32_t count = s.counts_[t];
        if (count == 0) continue;  // already applied for this token
        l[t] -= static_cast<float>(count) * params.frequency_penalty + params.presence_penalty;
        s.counts_[t] = 0;
      }
    }
    return absl::OkStatus();
  }

  // Step 4, greedy: the first maximum, so ties go to the lowest id.
  static absl::StatusOr<int32_t> Argmax(const SamplerScratch& s) {
    const float* l = s.logits_.data();
    const size_t vocab = s.logits_.size();
    const float best_value = MaxOf(l, vocab);
    if (best_value == -kInf) return NothingToSampleError();
    return static_cast<int32_t>(std::find(l, l + vocab, best_value) - l);
  }

  // Steps 4 (temperature) to 8. Returns true when the result is the dense form (every token with
  // w > 0 survives), false when it is s.candidates_.
  static absl::StatusOr<bool> Filter(const SamplingParams& params, SamplerScratch& s) {
    std::vector<Candidate>& c = s.candidates_;
    const float* l = s.logits_.data();
    const size_t vocab = s.logits_.size();
    const float temperature = params.temperature;
    const bool top_p = params.top_p < 1.0f;
    const bool typical = params.typical_p < 1.0f;
    const bool min_p = params.min_p > 0.0f;
    c.clear();

    if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) {
      // top_k first: temperature scaling is monotone, so selecting on the unscaled logits gives
      // the same set and spares scaling and exponentiating the whole vocabulary.
      TopK(l, vocab, static_cast<size_t>(params.top_k), c);
      if (c.empty()) return NothingToSampleError();
      float max_logit = -kInf;
      for (const Candidate& a : c) max_logit = std::max(max_logit, a.x);
      size_t n = 0;
      for (const Candidate& a : c) {
        const float x = (a.x - max_logit) / temperature;
        const float w = ExpNonPositive(x);
        if (w > 0.0f) c[n++] = {a.id, x, w};  // underflowed tokens can never be drawn
      }
      c.resize(n);
      if (top_p) TopP(params.top_p, c);
      if (typical) Typical(params.typical_p, c);
      if (min_p) MinP(params.min_p, c);
      return false;
    }

    // Dense: shifting by the maximum before dividing keeps tiny temperatures from overflowing:
    // x <= 0 and the top token has w = 1.
    const float max_logit = MaxOf(l, vocab);
    if (max_logit == -kInf) return NothingToSampleError();
    s.xs_.resize(vocab);
    s.weights_.resize(vocab);
    s.block_sums_.resize((vocab + kBlock - 1) / kBlock);
    s.total_weight_ = ExpWeights<true>(l, vocab, max_logit, temperature, s.xs_.data(),
                                       s.weights_.data(), s.block_sums_.data());
    const float* x = s.xs_.data();
    const float* w = s.weights_.data();
    if (top_p) {
      DenseTopP(params.top_p, s);
      if (typical) Typical(params.typical_p, c);
    } else if (typical) {
      DenseTypical(params.typical_p, s);
    } else if (min_p) {
      // Alone, min_p is a threshold on x (the top token has x = 0), so only survivors are listed;
      // the comparison is MinP's, which then keeps them all.
      const double threshold = std::log(static_cast<double>(params.min_p));
      for (size_t i = 0; i < vocab; ++i) {
        if (w[i] > 0.0f && static_cast<double>(x[i]) >= threshold) {
          c.push_back({static_cast<int32_t>(i), x[i], w[i]});
        }
      }
    } else {
      return true;
    }
    if (min_p) MinP(params.min_p, c);
    return false;
  }

 private:
  // A function object rather than a function, so that the std algorithms inline it.
  struct ByLogitDescT {
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.x > b.x || (a.x == b.x && a.id < b.id);
    }
  };
  static constexpr ByLogitDescT ByLogitDesc{};

  // Weighted selection: with c ordered by cmp (conceptually; it is never fully sorted), returns
  // the first position i at which `before` plus the mass preceding i (plus c[i]'s own weight when
  // inclusive) reaches limit, or c.size() when none does. Afterwards c[0, i) holds the i best
  // elements and, for i < size, c[i] is the element that sorts at position i. Quickselect on
  // mass: expected O(n); only a small final range is sorted, which also fixes the order of ties
  // (cmp is total: ids break ties).
  template <typename Cmp>
  static size_t FirstReaching(std::vector<Candidate>& c, Cmp cmp, double limit, bool inclusive,
                              double before) {
    size_t lo = 0, hi = c.size();
    // Invariant: the answer lies in [lo, hi]; c[0, lo) <= c[lo, hi) <= c[hi, n) under cmp;
    // `before` is the mass of c[0, lo) (plus the initial offset); hi < n only when position hi is
    // known to reach the limit.
    while (hi - lo > kSelectSortRange) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(c.begin() + lo, c.begin() + mid, c.begin() + hi, cmp);
      double left = 0.0;
      for (size_t i = lo; i < mid; ++i) left += c[i].w;
      if (before + left + (inclusive ? c[mid].w : 0.0) >= limit) {
        hi = mid;
      } else {
        before += left + c[mid].w;
        lo = mid + 1;
      }
    }
    std::sort(c.begin() + lo, c.begin() + hi, cmp);
    for (size_t i = lo; i < hi; ++i) {
      if (before + (inclusive ? c[i].w : 0.0) >= limit) return i;
      before += c[i].w;
    }
    return hi;
  }

  // Dense counterpart of FirstReaching's first step: orders tokens (w > 0) by bin_of(x), a
  // monotone bucketing of the selection key (equal keys share a bin; bin_of.binning says how many
  // bins), and finds the bin at which the cumulative mass, inclusive of the bin, first reaches
  // limit. Tokens of earlier bins go to s.candidates_, those of that bin to s.boundary_; returns
  // the mass of s.candidates_ (from the bin sums, so that it is consistent with the choice of
  // bin). Two linear passes, no sort. When rounding leaves the limit unreached, every token goes
  // to s.candidates_ and s.boundary_ stays empty.
  template <typename BinFn>
  static double SplitAtMass(SamplerScratch& s, BinFn bin_of, double limit) {
    const float* x = s.xs_.data();
    const float* w = s.weights_.data();
    const size_t vocab = s.weights_.size();
    std::vector<double>& mass = s.bin_mass_;
    std::vector<int32_t>& count = s.bin_count_;
    const int bins = bin_of.binning.bins;
    // kLanes interleaved histograms, merged afterwards: consecutive tokens often share a bin
    // (ties, or the long tail of a peaked distribution), and a single histogram would then
    // serialise on the store-to-load latency of mass[b]. Tokens with w = 0 (x = -inf or
    // underflowed) land in the last bin and add nothing; no branches, as bins are data-dependent.
    constexpr int kLanes = 4;
    mass.assign(static_cast<size_t>(bins) * kLanes, 0.0);
    count.assign(static_cast<size_t>(bins) * kLanes, 0);
    for (size_t i = 0; i < vocab; ++i) {
      const size_t slot = static_cast<size_t>(bin_of(x[i])) * kLanes + (i % kLanes);
      mass[slot] += w[i];
      count[slot] += w[i] > 0.0f;
    }
    for (int b = 0; b < bins; ++b) {
      const size_t base = static_cast<size_t>(b) * kLanes;
      mass[b] = (mass[base] + mass[base + 1]) + (mass[base + 2] + mass[base + 3]);
      count[b] = (count[base] + count[base + 1]) + (count[base + 2] + count[base + 3]);
    }
    int boundary_bin = 0;
    size_t before_count = 0;
    double cumulative = 0.0;
    for (; boundary_bin < bins; ++boundary_bin) {
      if (cumulative + mass[boundary_bin] >= limit) break;
      cumulative += mass[boundary_bin];
      before_count += count[boundary_bin];
    }
    const size_t boundary_count = boundary_bin < bins ? count[boundary_bin] : 0;
    // Branch-free compaction: every token is written at the next free slot, which only advances
    // when the token belongs there; one spare slot absorbs the write after the last one.
    s.candidates_.resize(before_count + 1);
    s.boundary_.resize(boundary_count + 1);
    Candidate* kept = s.candidates_.data();
    Candidate* boundary = s.boundary_.data();
    size_t num_kept = 0, num_boundary = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const int b = bin_of(x[i]);
      const bool positive = w[i] > 0.0f;
      const bool before = positive && b < boundary_bin;
      const Candidate candidate = {static_cast<int32_t>(i), x[i], w[i]};
      kept[num_kept] = candidate;
      boundary[num_boundary] = candidate;
      num_kept += before;
      num_boundary += positive && b == boundary_bin;
    }
    s.candidates_.resize(num_kept);
    s.boundary_.resize(num_boundary);
    return cumulative;
  }

  // Step 6 on a candidate list: keeps the tokens, in (probability desc, id asc) order, whose
  // preceding mass is < top_p.
  static void TopP(float top_p, std::vector<Candidate>& c) {
    double total = 0.0;
    for (const Candidate& a : c) total += a.w;
    // Position 0 never reaches the limit (nothing precedes it), so the top token survives.
    c.resize(FirstReaching(c, ByLogitDesc, static_cast<double>(top_p) * total,
                           /*inclusive=*/false, 0.0));
  }

  // Step 6 on the dense form: the same rule, with the boundary searched in one histogram bin.
  static void DenseTopP(float top_p, SamplerScratch& s) {
    const double limit = static_cast<double>(top_p) * s.total_weight_;
    // Key -x: ascending key is descending probability; equal logits share a bin.
    struct TopPBin {
      Binning binning;
      int operator()(float x) const { return binning(-x); }
    };
    const double before = SplitAtMass(s, TopPBin{Binning(NumBins(s.weights_.size()))}, limit);
    std::vector<Candidate>& boundary = s.boundary_;
    const size_t keep = FirstReaching(boundary, ByLogitDesc, limit, /*inclusive=*/false, before);
    s.candidates_.insert(s.candidates_.end(), boundary.begin(), boundary.begin() + keep);
  }

  // |-log p - H| = |E[x] - x|, since log p = x - log Z and H = log Z - E[x]: one subtraction per
  // comparison, and equal logits always get equal scores.
  struct TypicalScore {
    double mean;
    double operator()(float x) const { return std::fabs(mean - static_cast<double>(x)); }
    double operator()(const Candidate& a) const { return (*this)(a.x); }
  };
  struct ByScore {
    TypicalScore score;
    bool operator()(const Candidate& a, const Candidate& b) const {
      const double sa = score(a), sb = score(b);
      return sa < sb || (sa == sb && a.id < b.id);
    }
  };

  // Step 7 on a candidate list.
  static void Typical(float mass, std::vector<Candidate>& c) {
    double total = 0.0, weighted = 0.0;
    for (const Candidate& a : c) {
      total += a.w;
      weighted += static_cast<double>(a.w) * a.x;
    }
    const TypicalScore score{weighted / total};
    size_t last = FirstReaching(c, ByScore{score}, static_cast<double>(mass) * total,
                                /*inclusive=*/true, 0.0);
    if (last == c.size()) last = c.size() - 1;  // rounding kept the mass short: the worst one
    // Everything scoring no worse than the boundary token, ties included (HF).
    const double threshold = score(c[last]);
    c.erase(std::partition(c.begin(), c.end(),
                           [&](const Candidate& a) { return score(a) <= threshold; }),
            c.end());
  }

  // Step 7 on the dense form.
  static void DenseTypical(float mass, SamplerScratch& s) {
    const float* x = s.xs_.data();
    const float* w = s.weights_.data();
    double weighted = 0.0;
    for (size_t i = 0; i < s.weights_.size(); ++i) {
      if (w[i] > 0.0f) weighted += static_cast<double>(w[i]) * x[i];
    }
    const TypicalScore score{weighted / s.total_weight_};
    const double limit = static_cast<double>(mass) * s.total_weight_;
    struct TypicalBin {
      Binning binning;
      TypicalScore score;
      int operator()(float x) const { return binning(static_cast<float>(score(x))); }
    };
    const double before =
        SplitAtMass(s, TypicalBin{Binning(NumBins(s.weights_.size())), score}, limit);
    std::vector<Candidate>& boundary = s.boundary_;
    if (boundary.empty()) return;  // never reached: all survive, already in candidates_
    size_t last = FirstReaching(boundary, ByScore{score}, limit, /*inclusive=*/true, before);
    if (last == boundary.size()) last = boundary.size() - 1;
    const double threshold = score(boundary[last]);
    for (const Candidate& a : boundary) {
      if (score(a) <= threshold) s.candidates_.push_back(a);
    }
  }

  // Step 8: p >= min_p * p_max  <=>  x - x_max >= log(min_p): no exponentials needed.
  static void MinP(float min_p, std::vector<Candidate>& c) {
    float max_x = -kInf;
    for (const Candidate& a : c) max_x = std::max(max_x, a.x);
    const double threshold = static_cast<double>(max_x) + std::log(static_cast<double>(min_p));
    c.erase(std::remove_if(
                c.begin(), c.end(),
                [threshold](const Candidate& a) { return static_cast<double>(a.x) < threshold; }),
            c.end());
  }

  // Keeps every finite token whose logit is >= the k-th largest (k < vocab).
  static void TopK(const float* l, size_t vocab, size_t k, std::vector<Candidate>& c) {
    // Bounded heap whose front is the worst kept candidate. Scanning ids in increasing order, a
    // newcomer equal to the front has a higher id, so it is worse and rejected; hence the heap
    // holds the lowest ids of the boundary value, and the rejected ties are found by a second
    // pass only when one was seen.
    bool tie_rejected = false;
    for (size_t i = 0; i < vocab; ++i) {
      const float v = l[i];
      if (!(v > -kInf)) continue;
      if (c.size() < k) {
        c.push_back({static_cast<int32_t>(i), v, 0.0f});
        std::push_heap(c.begin(), c.end(), ByLogitDesc);
      } else if (v > c.front().x) {
        std::pop_heap(c.begin(), c.end(), ByLogitDesc);
        c.back() = {static_cast<int32_t>(i), v, 0.0f};
        std::push_heap(c.begin(), c.end(), ByLogitDesc);
      } else if (v == c.front().x) {
        tie_rejected = true;
      }
    }
    if (c.size() < k || !tie_rejected) return;
    const float kth = c.front().x;
    int32_t last_kept = -1;
    for (const Candidate& a : c) {
      if (a.x == kth) last_kept = std::max(last_kept, a.id);
    }
    for (size_t i = static_cast<size_t>(last_kept) + 1; i < vocab; ++i) {
      if (l[i] == kth) c.push_back({static_cast<int32_t>(i), kth, 0.0f});
    }
  }
};

absl::Status PrepareLogits(absl::Span<const float> logits, const SamplingParams& params,
                           const SamplingContext& ctx, SamplerScratch& scratch) {
  return LogitsProcessors::Prepare(logits, params, ctx, scratch);
}

bool RowIsUnedited(const SamplingParams& params, const SamplingContext& ctx) {
  return ctx.suppressed_tokens.empty() && params.allowed_token_ids.empty() &&
         params.bad_words_token_ids.empty() && params.logit_bias.empty() &&
         params.choice_token_ids.empty() && params.constraint == nullptr &&
         params.repetition_penalty == 1.0f &&
         params.frequency_penalty == 0.0f && params.presence_penalty == 0.0f;
}

absl::StatusOr<int32_t> UneditedGreedyToken(absl::Span<const float> logits,
                                            const SamplingParams& params,
                                            const SamplingContext& ctx) {
  return LogitsProcessors::UneditedArgmax(logits, params, ctx);
}

absl::StatusOr<int32_t> GreedyToken(const SamplerScratch& scratch) {
  return LogitsProcessors::Argmax(scratch);
}

absl::StatusOr<bool> FilterLogits(const SamplingParams& params, SamplerScratch& scratch) {
  return LogitsProcessors::Filter(params, scratch);
}

absl::StatusOr<std::vector<TokenProbability>> SamplingDistribution(absl::Span<const float> logits,
                                                                   const SamplingParams& params,
                                                                   const SamplingContext& ctx,
                                                                   SamplerScratch& scratch) {
  return LogitsProcessors::RunDistribution(logits, params, ctx, scratch);
}

}  // namespace blossom
