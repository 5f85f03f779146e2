#include "benchmarks/roofline.h"

#include <algorithm>

namespace blossom {

DecodeCost DecodeCostOf(const BloomShape& shape, DType weight_dtype, DType kv_dtype) {
  DecodeCost cost;
  cost.params = shape.ParamCount();
  cost.weight_bytes = static_cast<double>(cost.params) * DTypeSize(weight_dtype);
  cost.kv_bytes_per_token =
      2.0 * static_cast<double>(shape.layers) * shape.hidden * DTypeSize(kv_dtype);
  return cost;
}

RooflinePoint ComputeRoofline(const DecodeCost& cost, const HardwareRates& rates,
                              int32_t batch_size, double kv_tokens_per_step,
                              double measured_step_s) {
  RooflinePoint p;
  p.batch_size = batch_size;
  p.kv_tokens_per_step = kv_tokens_per_step;
  p.bytes_per_step = cost.weight_bytes + cost.kv_bytes_per_token * kv_tokens_per_step;
  p.flops_per_step = 2.0 * static_cast<double>(cost.params) * batch_size;
  p.memory_floor_s = rates.mem_bytes_per_s > 0.0 ? p.bytes_per_step / rates.mem_bytes_per_s : 0.0;
  p.compute_floor_s =
      rates.gemm_flops_per_s > 0.0 ? p.flops_per_step / rates.gemm_flops_per_s : 0.0;
  p.floor_s = std::max(p.memory_floor_s, p.compute_floor_s);
  p.bound = p.memory_floor_s >= p.compute_floor_s ? "memory" : "compute";
  p.measured_step_s = measured_step_s;
  if (measured_step_s > 0.0) {
    p.memory_fraction = p.memory_floor_s / measured_step_s;
    p.compute_fraction = p.compute_floor_s / measured_step_s;
    p.fraction = p.floor_s / measured_step_s;
  }
  return p;
}

double PrefillFlops(const BloomShape& shape, const std::vector<int32_t>& prompt_lengths) {
  const double h = static_cast<double>(shape.hidden), layers = static_cast<double>(shape.layers);
  const double per_token = 2.0 * layers * (12.0 * h * h + 9.0 * h);
  double flops = 0.0;
  for (int32_t t : prompt_lengths) {
    const double tokens = static_cast<double>(t);
    flops += per_token * tokens + 4.0 * layers * h * tokens * (tokens + 1.0) / 2.0 +
             2.0 * static_cast<double>(shape.vocab) * h;
  }
  return flops;
}

PrefillPoint ComputePrefillRoofline(const BloomShape& shape, const HardwareRates& rates,
                                    const std::vector<int32_t>& prompt_lengths,
                                    double measured_s) {
  PrefillPoint p;
  p.flops = PrefillFlops(shape, prompt_lengths);
  p.compute_floor_s = rates.gemm_flops_per_s > 0.0 ? p.flops / rates.gemm_flops_per_s : 0.0;
  p.measured_s = measured_s;
  if (measured_s > 0.0) {
    p.tflops = p.flops / measured_s / 1e12;
    p.fraction = p.compute_floor_s / measured_s;
  }
  return p;
}

}  // namespace blossom
