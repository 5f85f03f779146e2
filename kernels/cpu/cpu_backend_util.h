// Helpers the CPU backend's source files share (cpu_backend.cc, cpu_backend_kv.cc): argument
// checks and per-thread scratch. Internal to the cpu_backend target.
#ifndef BLOSSOM_KERNELS_CPU_CPU_BACKEND_UTIL_H_
#define BLOSSOM_KERNELS_CPU_CPU_BACKEND_UTIL_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"

namespace blossom {
namespace cpu_internal {

// InvalidArgument "op: what" unless ok.
inline absl::Status Check(bool ok, absl::string_view op, absl::string_view what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

inline bool IsF32(const Tensor& t) { return t.dtype == DType::kF32 && t.data != nullptr; }

// Per-thread scratch that keeps its capacity between ops, so a steady-state step allocates
// nothing. Each op uses its own slot (the index) and only for its duration.
template <typename T>
std::vector<T>& Scratch(int slot, size_t size) {
  thread_local std::vector<T> buffers[3];
  std::vector<T>& v = buffers[slot];
  v.resize(size);
  return v;
}

}  // namespace cpu_internal
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_CPU_BACKEND_UTIL_H_
