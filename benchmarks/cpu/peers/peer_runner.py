#!/usr/bin/env python3
"""Times one peer engine (CTranslate2 or Hugging Face transformers) on one checkpoint and prints
one JSON object, with the same points and prompt ids as Blossom's cpu-step-bench:

    peer_runner.py --engine ct2|hf --model DIR [--compute-type float32|bfloat16|int8]
        [--threads 2] [--prompt-tokens 128] [--decode-tokens 32] [--batch 8]
        [--batch-prompt-tokens 16]

  prefill_ms           one prompt of --prompt-tokens tokens -> its first new token
  decode_ms_per_token  batch 1 after that prompt: (time for 1 + n new tokens - time for 1) / n
  batch_tokens_per_s   --batch prompts of --batch-prompt-tokens decoded together: decode tokens
                       (all but each row's first) / (time for all - time for the first token)

Both engines generate greedily with EOS ignored (a random checkpoint would otherwise stop at
random places). Runs inside the peers' venv (setup_peers.sh), not under Bazel.
"""
import argparse
import json
import statistics
import sys
import time


def prompt_ids(n, seed, vocab):
    """The ids cpu-step-bench uses (same LCG), so every engine sees the same prompts."""
    ids = []
    s = (seed * 2654435761 + 1) & 0xFFFFFFFF
    hi = min(vocab, 2000)
    for _ in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        ids.append(3 + (s >> 8) % (hi - 3))
    return ids


def timed(fn, reps):
    """Median wall time of fn() over reps calls."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Ct2Engine:
    def __init__(self, args):
        import ctranslate2
        self.generator = ctranslate2.Generator(args.model, device="cpu",
                                               compute_type=args.compute_type,
                                               intra_threads=args.threads, inter_threads=1)
        # ctranslate2 takes token strings: the converted model's vocabulary maps ids to them.
        import os
        vocab_path = os.path.join(args.model, "vocabulary.json")
        with open(vocab_path) as f:
            self.vocab = json.load(f)
        self.version = "ctranslate2 " + ctranslate2.__version__

    def vocab_size(self):
        return len(self.vocab)

    def generate(self, prompts, new_tokens):
        tokens = [[self.vocab[i] for i in p] for p in prompts]
        self.generator.generate_batch(tokens, max_length=new_tokens, min_length=new_tokens,
                                      sampling_topk=1, include_prompt_in_result=False,
                                      end_token=[])


class HfEngine:
    def __init__(self, args):
        import torch
        import transformers
        torch.set_num_threads(args.threads)
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(args.compute_type)
        if dtype is None:
            raise SystemExit("peer_runner: hf supports float32 and bfloat16, not %s" %
                             args.compute_type)
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(args.model,
                                                                       torch_dtype=dtype).eval()
        self.version = "transformers %s, torch %s" % (transformers.__version__, torch.__version__)

    def vocab_size(self):
        return self.model.config.vocab_size

    def generate(self, prompts, new_tokens):
        ids = self.torch.tensor(prompts, dtype=self.torch.long)
        with self.torch.inference_mode():
            self.model.generate(ids, attention_mask=self.torch.ones_like(ids), do_sample=False,
                                max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                pad_token_id=0)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["ct2", "hf"], required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--compute-type", default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batch-prompt-tokens", type=int, default=16)
    p.add_argument("--reps", type=int, default=1, help="timed repetitions per point (median)")
    args = p.parse_args()

    engine = (Ct2Engine if args.engine == "ct2" else HfEngine)(args)
    vocab = engine.vocab_size()
    one = [prompt_ids(args.prompt_tokens, 1, vocab)]
    many = [prompt_ids(args.batch_prompt_tokens, 10 + i, vocab) for i in range(args.batch)]
    engine.generate([prompt_ids(8, 99, vocab)], 2)  # warm-up, untimed
    n = args.decode_tokens
    first = timed(lambda: engine.generate(one, 1), args.reps)
    whole = timed(lambda: engine.generate(one, n), args.reps)
    batch_first = timed(lambda: engine.generate(many, 1), args.reps)
    batch_whole = timed(lambda: engine.generate(many, n), args.reps)
    if whole <= first or batch_whole <= batch_first:
        sys.exit("peer_runner: generating %d tokens took no longer than 1 (%.3f vs %.3f s, batch "
                 "%.3f vs %.3f s): too noisy to time; use more --decode-tokens" %
                 (n, whole, first, batch_whole, batch_first))
    print(json.dumps({
        "engine": engine.version,
        "compute_type": args.compute_type,
        "threads": args.threads,
        "prompt_tokens": args.prompt_tokens,
        "prefill_ms": first * 1e3,
        "decode_tokens": n,
        "decode_ms_per_token": (whole - first) / (n - 1) * 1e3,
        "batch": args.batch,
        "batch_tokens_per_s": args.batch * (n - 1) / (batch_whole - batch_first),
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
