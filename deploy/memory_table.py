#!/usr/bin/env python3
"""Prints the GPU memory arithmetic table of deploy/README.md (markdown), per BLOOM size and GPU.

    python3 deploy/memory_table.py                          # print it
    python3 deploy/memory_table.py --check deploy/README.md  # //deploy:memory_table_test

Per rank with --backend cuda, bf16 weights (2 bytes), bf16 activations and KV cache:
  weights   = parameters x 2 / tp  (every large weight is split, the embedding by vocabulary)
  reserve   = what blossom-server holds back for activations: ActivationReserveBytes in
              engine/model/rank_setup.cc (8,192 tokens + 512 logit rows of workspace + 512 MiB)
  context   = CUDA context, cuBLASLt workspace, NCCL buffers: an estimate (1.5 GiB; measure with
              nvidia-smi on your GPU)
  KV budget = gpu_memory_fraction (0.90) x GPU memory - weights - reserve - context
  KV/token  = 2 (K, V) x layers x hidden x 2 bytes / tp
Parameters: V*h + 4h + L*(12h^2 + 13h) (tied embedding; layer norms, QKV, dense, MLP and biases).
"""
import sys

GIB = 1 << 30
VOCAB = 250880
MODELS = [  # name, layers, hidden, heads
    ("bloom-560m", 24, 1024, 16),
    ("bloom-1b1", 24, 1536, 16),
    ("bloom-1b7", 24, 2048, 16),
    ("bloom-3b", 30, 2560, 32),
    ("bloom-7b1", 30, 4096, 32),
    ("bloom (176B)", 70, 14336, 112),
]
GPUS = [  # name, memory as the driver reports it (MiB)
    ("L4 24 GB", 23034),
    ("A100 40 GB", 40960),
    ("H100 80 GB", 81559),
    ("H200 141 GB", 143771),
]
FRACTION = 0.90
CONTEXT = 1.5 * GIB


def params(layers, h):
    return VOCAB * h + 4 * h + layers * (12 * h * h + 13 * h)


def reserve(h, tp):
    local = h // tp
    per_token = 2 * (3 * h + 3 * local + 2 * local + 4 * h // tp) + 16
    vocab_local = -(-VOCAB // tp)
    per_row = 2 * 2 * h + 4 * vocab_local * (1 + tp) + 4
    return 8192 * per_token + 512 * per_row + 512 * (1 << 20)


def table():
    lines = []
    print = lines.append  # noqa: A001 (the table is built line by line below)
    print("| model | parameters | weights (bf16) | KV per token | GPU | tp | weights / rank | "
          "reserve + context / rank | KV budget / rank | tokens of KV |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, layers, h, heads in MODELS:
        p = params(layers, h)
        kv_token = 2 * layers * h * 2
        for gpu, mib in GPUS:
            total = mib * (1 << 20)
            for tp in (1, 2, 4, 8, 16):
                if heads % tp:
                    continue
                w = p * 2 / tp
                r = reserve(h, tp) + CONTEXT
                budget = FRACTION * total - w - r
                tokens = budget / (kv_token / tp)
                if tokens >= 16384:  # at least eight 2,048-token sequences
                    nodes = " (2 nodes)" if tp > 8 else ""
                    print(f"| {name} | {p / 1e9:.2f} B | {p * 2 / 1e9:.1f} GB | "
                          f"{kv_token / (1 << 10):,.0f} KiB | {gpu} | {tp}{nodes} | "
                          f"{w / GIB:.1f} GiB | {r / GIB:.1f} GiB | {budget / GIB:.1f} GiB | "
                          f"{tokens:,.0f} |")
                    break
            else:
                print(f"| {name} | {p / 1e9:.2f} B | {p * 2 / 1e9:.1f} GB | "
                      f"{kv_token / (1 << 10):,.0f} KiB | {gpu} | - | does not fit in 16 GPUs "
                      "| | | |")
    return "\n".join(lines)


def main(argv):
    """No argument: print the table. --check README: exit 1 unless README holds it verbatim."""
    if len(argv) == 2 and argv[0] == "--check":
        with open(argv[1], encoding="utf-8") as f:
            if table() not in f.read():
                sys.stdout.write(f"FAIL: {argv[1]} does not hold the current table; paste the "
                                 "output of python3 deploy/memory_table.py\n")
                return 1
        sys.stdout.write(f"memory_table: {argv[1]} holds the current table\n")
        return 0
    sys.stdout.write(table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
