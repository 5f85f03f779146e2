// Run-time CPU feature checks for the kernels' instruction-set paths. Kernels are compiled for the
// baseline x86-64 target plus per-function target attributes, and pick a path with these checks,
// so one binary runs on every CPU (no ifunc resolvers: they break ThreadSanitizer builds).
#ifndef BLOSSOM_KERNELS_CPU_CPU_FEATURES_H_
#define BLOSSOM_KERNELS_CPU_CPU_FEATURES_H_

// Function attribute for the AVX2 kernels: compiled for AVX2 + FMA + F16C whatever the build's
// -march, and called only after CpuHasAvx2Fma() said yes.
#define BLOSSOM_AVX2 __attribute__((target("avx2,fma,f16c")))
// The same for the AVX-512 kernels (F + VL + DQ + BW, with AVX2), after CpuHasAvx512().
#define BLOSSOM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw")))

namespace blossom {

// AVX2 + FMA + F16C (Haswell, Zen and later). False on other architectures.
bool CpuHasAvx2Fma();
// AVX-512 F + VL + DQ + BW (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later), with AVX2.
bool CpuHasAvx512();
// AVX-VNNI, the VEX-encoded vpdpbusd (Alder Lake / Sapphire Rapids and later, Zen 5), with AVX2.
bool CpuHasAvxVnni();
// AVX512-VNNI with AVX512VL (vpdpbusd on 256-bit registers; Ice Lake, Cascade Lake, Zen 4), with
// AVX2.
bool CpuHasAvx512Vnni();
// AVX512-BF16 (vdpbf16ps; Cooper Lake, Sapphire Rapids, Zen 4) with AVX-512 F/VL/DQ/BW.
bool CpuHasAvx512Bf16();

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_CPU_FEATURES_H_
