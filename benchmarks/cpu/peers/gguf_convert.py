#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a Blossom benchmark checkpoint.

    gguf_convert.py LLAMA_CPP_DIR MODEL_DIR OUTFILE OUTTYPE      (OUTTYPE: f32, bf16, q8_0)

The converter names the BPE pre-tokenizer by hashing how the tokenizer splits a probe text and
refuses tokenizers it does not know. A benchmark checkpoint from make-random-checkpoint carries
the small bundled BLOOM-style tokenizer, which it has never seen: for that one case we answer
"bloom" (its splitting rules are BLOOM's). The benchmark feeds token ids, so the tokenizer only
has to load; the weights are converted by the converter itself.
"""
import os
import runpy
import sys


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    llama_dir, model_dir, outfile, outtype = sys.argv[1:]
    sys.path.insert(0, llama_dir)
    import torch
    # Debian 12's torch 1.13 predates the float8 dtypes, which the converter only names in its
    # dtype tables; the benchmark checkpoints hold none, so placeholders let the tables build.
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, object())
    import conversion.base as base  # llama.cpp's converter package

    known = base.TextModel.get_vocab_base_pre

    def vocab_base_pre(self, tokenizer):
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return "bloom"

    base.TextModel.get_vocab_base_pre = vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", outtype]
    runpy.run_path(os.path.join(llama_dir, "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
