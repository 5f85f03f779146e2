// Token-length distributions for the serving benchmark's prompts and outputs:
//   fixed:N           every request N tokens
//   uniform:LO:HI     integers in [LO, HI], inclusive, equally likely
//   normal:MEAN:STD   rounded to the nearest integer, clamped to >= 1
// Every length is >= 1 (a request needs a prompt token and produces at least one token).
//
// Plain value type; Sample is a pure function of its arguments (seeded here); thread-safe.
#ifndef BLOSSOM_BENCHMARKS_LENGTH_DIST_H_
#define BLOSSOM_BENCHMARKS_LENGTH_DIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace blossom {

struct LengthDist {
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind = Kind::kFixed;
  double a = 1;  // fixed: N; uniform: LO; normal: mean
  double b = 0;  // uniform: HI; normal: std

  // The spec as parsed ("uniform:64:256").
  std::string ToString() const;
  // Expected value before clamping (for reports).
  double Mean() const;
};

absl::StatusOr<LengthDist> ParseLengthDist(const std::string& text);

// `count` lengths. Different `seed`s give independent draws (prompts and outputs use two).
std::vector<int32_t> SampleLengths(const LengthDist& dist, int count, uint64_t seed);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_LENGTH_DIST_H_
