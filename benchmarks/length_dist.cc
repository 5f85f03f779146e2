#include "benchmarks/length_dist.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace blossom {
namespace {

absl::Status Bad(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "length distribution '", text, "': ", why,
      " (expected fixed:N, uniform:LO:HI or normal:MEAN:STD)"));
}

}  // namespace

std::string LengthDist::ToString() const {
  switch (kind) {
    case Kind::kFixed: return absl::StrCat("fixed:", a);
    case Kind::kUniform: return absl::StrCat("uniform:", a, ":", b);
    case Kind::kNormal: return absl::StrCat("normal:", a, ":", b);
  }
  return "";
}

double LengthDist::Mean() const {
  return kind == Kind::kUniform ? (a + b) / 2 : a;
}

absl::StatusOr<LengthDist> ParseLengthDist(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  std::vector<double> numbers;
  for (size_t i = 1; i < parts.size(); ++i) {
    double v = 0;
    if (!absl::SimpleAtod(parts[i], &v) || !std::isfinite(v)) {
      return Bad(text, absl::StrCat("'", parts[i], "' is not a number"));
    }
    numbers.push_back(v);
  }
  LengthDist dist;
  auto is_int = [](double v) { return v == std::floor(v); };
  if (parts[0] == "fixed") {
    if (numbers.size() != 1) return Bad(text, "fixed takes one number");
    if (numbers[0] < 1 || !is_int(numbers[0])) return Bad(text, "N must be an integer >= 1");
    dist.kind = LengthDist::Kind::kFixed;
    dist.a = numbers[0];
  } else if (parts[0] == "uniform") {
    if (numbers.size() != 2) return Bad(text, "uniform takes two numbers");
    if (numbers[0] < 1 || !is_int(numbers[0]) || !is_int(numbers[1]) || numbers[1] < numbers[0]) {
      return Bad(text, "need integers 1 <= LO <= HI");
    }
    dist.kind = LengthDist::Kind::kUniform;
    dist.a = numbers[0];
    dist.b = numbers[1];
  } else if (parts[0] == "normal") {
    if (numbers.size() != 2) return Bad(text, "normal takes two numbers");
    if (numbers[0] < 1 || numbers[1] < 0) return Bad(text, "need MEAN >= 1 and STD >= 0");
    dist.kind = LengthDist::Kind::kNormal;
    dist.a = numbers[0];
    dist.b = numbers[1];
  } else {
    return Bad(text, absl::StrCat("unknown kind '", parts[0], "'"));
  }
  return dist;
}

std::vector<int32_t> SampleLengths(const LengthDist& dist, int count, uint64_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(std::max(count, 0)));
  std::mt19937_64 rng(seed);
  for (int32_t& len : out) {
    double v = dist.a;
    if (dist.kind == LengthDist::Kind::kUniform) {
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(dist.a), static_cast<int64_t>(dist.b))(rng));
    } else if (dist.kind == LengthDist::Kind::kNormal) {
      v = dist.b > 0 ? std::normal_distribution<double>(dist.a, dist.b)(rng) : dist.a;
    }
    len = static_cast<int32_t>(std::max(1.0, std::min(std::round(v), 1e9)));
  }
  return out;
}

}  // namespace blossom
