// The quantized GEMM of the CPU backend: out[M, N] = x[M, K] * w[N, K]^T (+ bias, + bloom_gelu)
// for weights of a block-quantized dtype (kQ8G32, kQ4G32; quant.h).
//
// Each call quantizes the x rows to Q8 blocks (per 32 elements of a row, so a row's codes depend
// on that row only), then every output element is one integer block dot product in the fixed
// order of quant_dot_tile.h, whatever M, the tile, the thread count or the instruction set: a
// row's result is bit-identical alone or in any batch, like GemmNT's. Tiles: 1 x-row by 4 weight
// rows below 4 rows (decode), 4 by 2 otherwise, and with AMX (int8 weights, 4 rows or more, padded
// to 16) 16 by 16 (quant_amx.h); for panel-packed int8 / int4 weights (kQ8G32Panel16,
// kQ4G32Panel16; quant_panel_tile.h)
// 8, 4 or 1 x rows by a panel of 16; columns in blocks that stay in L2; threads over output
// columns only.
//
// Why integer dots with quantized activations rather than widening the weights to fp32: AVX2 has
// no int8 x fp32 multiply, so widening costs two conversions per 8 weights before each FMA, while
// vpmaddubsw + vpmaddwd do 32 multiply-adds in two instructions; decode is memory-bound either way
// (int8 reads 1.125 bytes per weight, int4 0.625), prefill is compute-bound and gains from it.
//
// Thread-safe as GemmNT: no shared mutable state. The x codes live in a per-calling-thread buffer
// that keeps its capacity, so a steady-state step does not allocate.
#ifndef BLOSSOM_KERNELS_CPU_QUANT_GEMM_H_
#define BLOSSOM_KERNELS_CPU_QUANT_GEMM_H_

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace blossom {

// args.w_dtype must be kQ8G32, kQ4G32, kQ8G32Panel16 or kQ4G32Panel16 (then args.n a multiple of
// 16) and args.k
// a multiple of 32 (checked by the caller); isa as for GemmNT (kAvx2 uses the AVX2 integer tiles;
// panels take the AVX512-VNNI tile with kAvx2 or kAvx512 where the CPU has it, else the portable
// one: the same bits).
void QuantGemmNT(const GemmArgs& args, ThreadPool* pool, GemmIsa isa = GemmIsa::kAuto);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_QUANT_GEMM_H_
