// Roofline floors for one decode step of a BLOOM model: the least time a step can take if it is
// limited by memory traffic, or by arithmetic, on hardware with the given rates.
//
// A decode step of batch B reads every weight once (the tied embedding counted once, as the LM
// head; the embedding lookup touches only B rows) plus the cached K and V of every sequence in
// every layer, and does 2 * params * B FLOPs (one multiply-add per weight per token). Attention
// score FLOPs (4 * L * H * context per token) are left out, as in the usual 2*N*B estimate;
// at the seed's ~110-token contexts they are about 1% (560m) or less (0.1% for 176B).
// Activations are ignored on both sides.
//
// Pure arithmetic over plain values; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_ROOFLINE_H_
#define BLOSSOM_BENCHMARKS_ROOFLINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/bloom_shapes.h"
#include "benchmarks/hardware_probe.h"
#include "kernels/dtype.h"

namespace blossom {

// What one decode step costs, from the model's shapes and storage dtypes.
struct DecodeCost {
  int64_t params = 0;
  double weight_bytes = 0.0;        // params * weight dtype size
  double kv_bytes_per_token = 0.0;  // K and V of one cached token across all layers
};
DecodeCost DecodeCostOf(const BloomShape& shape, DType weight_dtype, DType kv_dtype);

struct RooflinePoint {
  int32_t batch_size = 0;
  double kv_tokens_per_step = 0.0;  // cached tokens read per step, summed over the batch
  double bytes_per_step = 0.0;      // weights + KV
  double flops_per_step = 0.0;      // 2 * params * batch
  double memory_floor_s = 0.0;      // bytes / bandwidth
  double compute_floor_s = 0.0;     // flops / GEMM rate
  double floor_s = 0.0;             // the larger of the two
  std::string bound;                // "memory" or "compute"
  double measured_step_s = 0.0;
  // floor / measured: 1.0 means the step runs at the roofline.
  double memory_fraction = 0.0;
  double compute_fraction = 0.0;
  double fraction = 0.0;
};

// measured_step_s <= 0 leaves the fractions 0.
RooflinePoint ComputeRoofline(const DecodeCost& cost, const HardwareRates& rates,
                              int32_t batch_size, double kv_tokens_per_step,
                              double measured_step_s);

// A prefill against the GEMM rate: the issue's "a 2048-token prefill at 60% or more of the
// measured bf16 GEMM rate". FLOPs of prompts of the given lengths, all of a batch: per token the
// four linears of every layer (2 * (12 h^2 + 9 h) * L, biases included), per sequence of T tokens
// causal attention (QK^T and PV: 4 * L * h * T (T + 1) / 2), and the LM head on each prompt's
// last row only (2 * V * h per sequence), as the engine computes it.
struct PrefillPoint {
  double flops = 0.0;
  double compute_floor_s = 0.0;  // flops / GEMM rate
  double measured_s = 0.0;
  double tflops = 0.0;           // flops / measured_s / 1e12
  double fraction = 0.0;         // compute_floor_s / measured_s: the share of the GEMM rate
};
double PrefillFlops(const BloomShape& shape, const std::vector<int32_t>& prompt_lengths);
// measured_s <= 0 leaves tflops and fraction 0.
PrefillPoint ComputePrefillRoofline(const BloomShape& shape, const HardwareRates& rates,
                                    const std::vector<int32_t>& prompt_lengths, double measured_s);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_ROOFLINE_H_
