#include "kernels/cpu/cpu_features.h"

namespace blossom {

bool CpuHasAvx2Fma() {
#if defined(__x86_64__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return supported;
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return CpuHasAvx2Fma() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw");
  }();
  return supported;
#else
  return false;
#endif
}

bool CpuHasAvxVnni() {
#if defined(__x86_64__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return CpuHasAvx2Fma() && __builtin_cpu_supports("avxvnni");
  }();
  return supported;
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return CpuHasAvx2Fma() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  }();
  return supported;
#else
  return false;
#endif
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return CpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
  }();
  return supported;
#else
  return false;
#endif
}

}  // namespace blossom
