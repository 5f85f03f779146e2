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

}  // namespace blossom
