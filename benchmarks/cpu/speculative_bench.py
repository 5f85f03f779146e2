#!/usr/bin/env python3
"""Speculative decoding (prompt lookup) on the CPU: what a verification step costs.

Runs `blossom generate` (the in-process CLI) on one model with --speculative_tokens k for each
k in --ks, alternating the settings run by run, and reports medians. A step that verifies k
drafts computes 1 + k rows whether the drafts are right or wrong, so its time is the worst case
(every draft rejected: the slowdown is step(k) / step(0)), and the greedy runs on a randomly
initialised checkpoint, whose output falls into a loop that lookup drafts perfectly, give the
best case (k + 1 tokens per step). Text that quotes its context lies in between; the accepted
counts in the table say where a run was.

  benchmarks/cpu/speculative_bench.py --blossom bazel-bin/clients/blossom --model DIR \\
      --ks 0,2,4,8 --runs 3 [--quantize int8] [--prompt TEXT] [--max-new-tokens 128]
"""
import argparse
import re
import statistics
import subprocess
import sys

LINE_TOKENS = re.compile(r"prompt (\d+) tokens, generated (\d+) tokens")
LINE_TIMES = re.compile(r"prefill ([\d.]+) ms, decode ([\d.]+) ms per token")
LINE_SPEC = re.compile(r"speculative: (\d+) decode steps, (\d+) of (\d+) draft tokens accepted")

DEFAULT_PROMPT = ("The library closes at six o'clock on weekdays and at noon on Saturdays. "
                  "Read the manual before you install the software.")


def run_once(args, k):
    cmd = [args.blossom, "generate", "--model", args.model, "--prompt", args.prompt,
           "--max_new_tokens", str(args.max_new_tokens), "--ignore_eos",
           "--speculative_tokens", str(k), "--temperature", str(args.temperature)]
    if args.quantize != "none":
        cmd += ["--quantize", args.quantize, "--quantize_lm_head"]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    err = proc.stderr
    tokens = LINE_TOKENS.search(err)
    times = LINE_TIMES.search(err)
    if tokens is None or times is None:
        sys.exit(f"no timing lines in the output of {' '.join(cmd)}:\n{err[-2000:]}")
    generated = int(tokens.group(2))
    decode_tokens = generated - 1
    decode_s = float(times.group(2)) * decode_tokens / 1000.0
    spec = LINE_SPEC.search(err)
    steps, accepted, drafted = (decode_tokens, 0, 0) if spec is None else map(int, spec.groups())
    return {"ms_per_token": float(times.group(2)), "ms_per_step": decode_s * 1000.0 / steps,
            "steps": steps, "accepted": accepted, "drafted": drafted,
            "completion": proc.stdout}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blossom", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--ks", default="0,2,4,8")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quantize", default="none")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    if 0 not in ks:
        ks = [0] + ks
    results = {k: [] for k in ks}
    for run in range(args.runs):
        order = ks if run % 2 == 0 else list(reversed(ks))
        for k in order:
            results[k].append(run_once(args, k))
    completions = {r["completion"] for rs in results.values() for r in rs}
    same = len(completions) == 1 if args.temperature == 0.0 or args.seed is not None else None
    base_step = statistics.median(r["ms_per_step"] for r in results[0])
    base_token = statistics.median(r["ms_per_token"] for r in results[0])
    print(f"model {args.model}, quantize {args.quantize}, {args.max_new_tokens} new tokens, "
          f"temperature {args.temperature}, {args.runs} runs alternating; medians [min to max]")
    print(f"same completion in every run: {same}")
    print()
    print("| k | ms per step | step vs k=0 (worst case) | steps | drafts accepted | "
          "ms per token | speed vs k=0 |")
    print("|---:|---|---:|---:|---:|---|---:|")
    for k in ks:
        rs = results[k]
        step = [r["ms_per_step"] for r in rs]
        tok = [r["ms_per_token"] for r in rs]
        med_step, med_tok = statistics.median(step), statistics.median(tok)
        print(f"| {k} | {med_step:.1f} [{min(step):.1f} to {max(step):.1f}] | "
              f"{med_step / base_step:.2f}x | {statistics.median(r['steps'] for r in rs):.0f} | "
              f"{statistics.median(r['accepted'] for r in rs):.0f} of "
              f"{statistics.median(r['drafted'] for r in rs):.0f} | "
              f"{med_tok:.1f} [{min(tok):.1f} to {max(tok):.1f}] | {base_token / med_tok:.2f}x |")


if __name__ == "__main__":
    main()
