#include "engine/model/alibi.h"

#include <algorithm>
#include <cmath>

namespace blossom {
namespace {

// fp32 base^i, correctly rounded (computed in double). torch's vectorised pow is accurate to
// about 1 ULP but not correctly rounded, so a few slopes differ from HF's by 1 ULP; rounding
// correctly keeps ours deterministic on every platform.
float PowRounded(float base, int exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

}  // namespace

std::vector<float> AlibiSlopes(int num_heads) {
  // torch: closest_power_of_2 = 2 ** floor(log2(n));
  //        base = tensor(2 ** (-(2 ** -(log2(closest_power_of_2) - 3))), float32)
  //        slopes = pow(base, arange(1, 1 + closest_power_of_2, dtype=int32))
  int closest = 1;
  while (closest * 2 <= num_heads) closest *= 2;
  auto base_for = [](int c) {
    double exponent = -std::pow(2.0, -(std::log2(static_cast<double>(c)) - 3.0));
    return static_cast<float>(std::pow(2.0, exponent));
  };
  std::vector<float> slopes;
  slopes.reserve(num_heads);
  const float base = base_for(closest);
  for (int i = 1; i <= closest; ++i) slopes.push_back(PowRounded(base, i));
  if (closest != num_heads) {
    const float extra_base = base_for(2 * closest);
    const int remaining = std::min(closest, num_heads - closest);
    for (int i = 0; i < remaining; ++i)
      slopes.push_back(PowRounded(extra_base, 1 + 2 * i));
  }
  return slopes;
}

}  // namespace blossom
