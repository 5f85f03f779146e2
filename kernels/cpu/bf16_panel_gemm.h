// The bf16-activation GEMM of the CPU backend (--quantize bf16): out[M, N] = bf16(x)[M, K] *
// w[N, K]^T (+ bias, + bloom_gelu) for panel-packed bf16 weights (DType::kBF16Panel16).
//
// Each call rounds the x rows to bf16 (RoundRowsToBf16: per element, so a row's values depend on
// that row only), then every output is one fp32 accumulation over k in the fixed order of
// bf16_panel_tile.h, whatever M, the tile, the thread count or the instruction set: a row's result
// is bit-identical alone or in any batch. Tiles: 8 or 4 x rows by 3 panels (48 outputs) for
// prefill and batches, 1 x row by 8 panels (128 outputs) below 4 rows; columns in blocks that stay
// in L2; threads over output columns only (tiled_gemm.h). bias and the epilogue stay fp32.
//
// Thread-safe as GemmNT: no shared mutable state. The bf16 x rows live in a per-calling-thread
// buffer that keeps its capacity, so a steady-state step does not allocate.
#ifndef BLOSSOM_KERNELS_CPU_BF16_PANEL_GEMM_H_
#define BLOSSOM_KERNELS_CPU_BF16_PANEL_GEMM_H_

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace blossom {

// args.w_dtype must be kBF16Panel16 (its storage Bf16PanelStorageBytes(n, k)) and args.k even
// (checked by the caller). isa: kPortable runs the portable tile; any other runs the AVX512-BF16
// tile where the CPU has it, else the portable one (the same bits, far slower).
void Bf16PanelGemmNT(const GemmArgs& args, ThreadPool* pool, GemmIsa isa = GemmIsa::kAuto);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_BF16_PANEL_GEMM_H_
