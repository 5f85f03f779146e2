// ALiBi slopes exactly as Hugging Face's build_alibi_tensor computes them.
#ifndef BLOSSOM_ENGINE_MODEL_ALIBI_H_
#define BLOSSOM_ENGINE_MODEL_ALIBI_H_

#include <vector>

namespace blossom {

// One slope per head. For n a power of two: base^i, i = 1..n, base = 2^(-8/n). Otherwise the
// closest power of two c below n gives c slopes, and the remaining n - c come from the odd powers
// of the 2c sequence (HF's second branch; BLOOM-176B has 112 heads).
// Computed in fp32 with the same operations as torch so the values match bit-for-bit.
std::vector<float> AlibiSlopes(int num_heads);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_ALIBI_H_
