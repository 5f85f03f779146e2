#!/usr/bin/env python3
"""Rounding error of the CPU GEMM's operation order (kernels/cpu/dot_tile.h) for several fp32
block lengths, against torch's fp32 matmul (the oracle's GEMM), both measured from an fp64 product.

The contract is emulated in numpy: per block of B elements of K, 8 fp32 lanes take one fused
multiply-add per element (emulated as an exact fp64 product plus the lane, rounded once to fp32),
then the block's lanes fold into 4 fp64 accumulators, a fixed reduction, one rounding to fp32.
Errors are in units of u = 2^-24 times sum |x_i w_i| (the scale a dot product's rounding error
grows with), over every element of an M x N product with LayerNorm-like x ~ N(0, 1) and
w ~ N(0, 0.02), at bloom-560m's K values (hidden 1024, MLP 4096).

Needs numpy and torch (the peer benchmark's venv has both):
    /work/peers/venv/bin/python benchmarks/cpu/dot_block_error.py [--blocks 256,512,1024]
"""
import argparse

import numpy as np
import torch


def contract_dots(x, w, block):
    m, k = x.shape
    n = w.shape[0]
    k8 = k // 8 * 8
    acc = np.zeros((m, n, 4))
    for b in range(0, k8, block):
        lane = np.zeros((m, n, 8), np.float32)
        for i in range(b, min(b + block, k8), 8):
            prod = x[:, None, i:i + 8].astype(np.float64) * w[None, :, i:i + 8].astype(np.float64)
            lane = (prod + lane.astype(np.float64)).astype(np.float32)
        acc += lane[..., :4].astype(np.float64) + lane[..., 4:].astype(np.float64)
    s = (acc[..., 0] + acc[..., 2]) + (acc[..., 1] + acc[..., 3])
    for i in range(k8, k):
        s += x[:, None, i].astype(np.float64) * w[None, :, i].astype(np.float64)
    return s.astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", default="256,512,1024")
    ap.add_argument("--ks", default="1024,4096")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=64)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    u = 2.0 ** -24
    print("| K | GEMM | max error (u sum|xw|) | rms error (u sum|xw|) |")
    print("|---|---|---|---|")
    for k in (int(v) for v in args.ks.split(",")):
        x = rng.standard_normal((args.m, k)).astype(np.float32)
        w = (0.02 * rng.standard_normal((args.n, k))).astype(np.float32)
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        mag = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
        results = [("torch fp32 matmul", (torch.from_numpy(x) @ torch.from_numpy(w).T).numpy())]
        for block in (int(v) for v in args.blocks.split(",")):
            results.append((f"contract, blocks of {block}", contract_dots(x, w, block)))
        for name, y in results:
            err = np.abs(y.astype(np.float64) - ref) / mag / u
            print(f"| {k} | {name} | {err.max():.2f} | {np.sqrt((err ** 2).mean()):.3f} |")


if __name__ == "__main__":
    main()
