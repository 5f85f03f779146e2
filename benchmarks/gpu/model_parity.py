#!/usr/bin/env python3
"""Whole-model parity on the GPU machine: Blossom's dumps against Hugging Face transformers.

For one checkpoint and a set of token-id prompts, HF transformers computes every prompt's logits
in fp32 and in fp64 (the oracle) and its greedy continuations in fp32; each Blossom dump made by
model-parity-dump (CPU fp32, CUDA fp32 / upcast, CUDA native fp16 or bf16) is compared with them:

- max |logits - fp64| over every position, next to HF fp32's own distance from fp64 (the fidelity
  contract: Blossom's fp32 engines are at least as close to fp64 as HF fp32 is);
- max |logits - HF fp32|, against each dump's stated tolerance (fp32 dumps 1e-4 of HF fp32 in
  absolute terms scaled by the largest |logit|; 16-bit ones 3% of the largest |logit|);
- greedy agreement with HF fp32: identical up to and including the first step whose top-2 margin
  in the fp64 logits is below 2 * tolerance; a divergence before that is a failure.

Writes parity.json and parity.md into --out-dir and exits 1 when a dump breaks its rule.
Usage:
  model_parity.py --model DIR --prompts ids.json --dump NAME=DIR[:TOL] ... --out-dir OUT
      [--device cuda] [--new-tokens 16]
TOL is "fp32" (default) or "half".
"""
import argparse
import datetime
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

FP32_REL = 1e-5   # of the largest |logit|, plus an absolute floor: fp32 summation-order noise
FP32_ABS = 1e-4
HALF_REL = 3e-2   # bf16 keeps 8 mantissa bits and every layer rounds its activations


def tolerance(kind, ref):
    top = float(np.max(np.abs(ref)))
    return FP32_ABS + FP32_REL * top if kind == "fp32" else HALF_REL * top


def hf_logits(model, prompts, device):
    out = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device=device)
            out.append(model(x).logits[0].double().cpu().numpy())
    return out


def hf_greedy(model, prompts, new_tokens, device):
    """Greedy tokens, by plain argmax over the full logits (no generate(): its logits processors,
    e.g. the minimum-length one, would change the scores)."""
    tokens = []
    with torch.no_grad():
        for ids in prompts:
            seq = list(ids)
            for _ in range(new_tokens):
                row = model(torch.tensor([seq], device=device)).logits[0, -1].double().cpu().numpy()
                seq.append(int(np.argmax(row)))  # the first maximum, as Blossom's argmax
            tokens.append(seq[len(ids):])
    return tokens


def margin(row):
    top2 = np.partition(row, -2)[-2:]
    return float(top2[1] - top2[0])


def load_dump(path):
    index = json.load(open(os.path.join(path, "index.json")))
    V = index["vocab"]
    prompts = []
    for p in index["prompts"]:
        logits = np.fromfile(os.path.join(path, p["logits_file"]), dtype="<f4").reshape(p["logits_shape"])
        steps = np.fromfile(os.path.join(path, p["steps_file"]), dtype="<f4").reshape(p["steps_shape"])
        prompts.append({"ids": p["ids"], "greedy": p["greedy"], "logits": logits, "steps": steps})
    return index, V, prompts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--dump", action="append", default=[], help="NAME=DIR[:fp32|half]")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--commit", default="")
    ap.add_argument("--machine", default="")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    prompts = json.load(open(args.prompts))

    ref64 = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float64).to(args.device).eval()
    l64 = hf_logits(ref64, prompts, args.device)
    ref32 = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).to(args.device).eval()
    l32 = hf_logits(ref32, prompts, args.device)
    g32 = hf_greedy(ref32, prompts, args.new_tokens, args.device)
    del ref32
    # fp64 logits along HF fp32's greedy path: the margins the near-tie rule reads.
    path64 = []
    with torch.no_grad():
        for ids, new in zip(prompts, g32):
            x = torch.tensor([ids + new[:-1]], device=args.device)
            path64.append(ref64(x).logits[0, len(ids) - 1:].double().cpu().numpy())
    del ref64
    hf32_vs_64 = max(float(np.max(np.abs(a - b))) for a, b in zip(l32, l64))

    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": args.model, "commit": args.commit, "machine": args.machine,
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "prompts": len(prompts), "prompt_lengths": [len(p) for p in prompts], "new_tokens": args.new_tokens,
        "hf_fp32_vs_fp64_max_abs": hf32_vs_64, "dumps": {},
    }
    failed = []
    for spec in args.dump:
        name, rest = spec.split("=", 1)
        path, _, kind = rest.partition(":")
        kind = kind or "fp32"
        index, V, dump = load_dump(path)
        assert len(dump) == len(prompts), f"{name}: {len(dump)} prompts, expected {len(prompts)}"
        vs64 = vs32 = 0.0
        worst_ratio = 0.0
        finite = True
        greedy_rows = []
        for i, d in enumerate(dump):
            assert d["ids"] == prompts[i], f"{name}: prompt {i} differs"
            finite &= bool(np.all(np.isfinite(d["logits"])) and np.all(np.isfinite(d["steps"])))
            vs64 = max(vs64, float(np.max(np.abs(d["logits"] - l64[i]))))
            diff32 = float(np.max(np.abs(d["logits"] - l32[i])))
            vs32 = max(vs32, diff32)
            worst_ratio = max(worst_ratio, diff32 / tolerance(kind, l32[i]))
            # Greedy: identical to HF fp32 until the first fp64 near-tie (margin < 2 * tol).
            agreed, rule_broken, stop = 0, False, None
            for s in range(args.new_tokens):
                row = path64[i][s]
                m = margin(row)
                tol = tolerance(kind, row)
                if d["greedy"][s] != g32[i][s]:
                    if m >= 2 * tol:
                        rule_broken = True
                    stop = {"step": s, "margin_fp64": m, "two_tol": 2 * tol, "near_tie": m < 2 * tol}
                    break
                agreed += 1
                if m < 2 * tol:
                    stop = {"step": s, "margin_fp64": m, "two_tol": 2 * tol, "near_tie": True}
                    break
            greedy_rows.append({"agreed_steps": agreed, "stopped_at": stop, "rule_broken": rule_broken})
        entry = {"kind": kind, "backend": index.get("backend"), "upcast": index.get("upcast"),
                 "max_abs_vs_fp64": vs64, "max_abs_vs_hf_fp32": vs32, "max_diff_over_tolerance": worst_ratio,
                 "all_finite": finite, "greedy": greedy_rows,
                 "greedy_identical_prompts": sum(r["stopped_at"] is None for r in greedy_rows)}
        problems = []
        if not finite:
            problems.append("non-finite logits")
        if worst_ratio > 1.0:
            problems.append(f"logits {worst_ratio:.3g} x tolerance from HF fp32")
        if any(r["rule_broken"] for r in greedy_rows):
            problems.append("greedy diverged from HF fp32 outside a near-tie")
        if kind == "fp32" and vs64 > hf32_vs_64 * 1.5 + 1e-6:
            problems.append(f"farther from fp64 ({vs64:.3g}) than HF fp32 ({hf32_vs_64:.3g}) by > 1.5x")
        entry["problems"] = problems
        report["dumps"][name] = entry
        if problems:
            failed.append(name)
    report["failed"] = failed
    json.dump(report, open(os.path.join(args.out_dir, "parity.json"), "w"), indent=1)
    md = [f"# Whole-model parity with HF transformers ({report['date']})", "",
          f"- model: `{args.model}`; {len(prompts)} prompts of {report['prompt_lengths']} tokens, "
          f"{args.new_tokens} greedy tokens", f"- commit {args.commit}; {args.machine}",
          f"- torch {report['torch']}, transformers {report['transformers']}",
          f"- HF fp32 vs HF fp64: max |diff| {hf32_vs_64:.3g}", "",
          "Greedy: steps agreeing with HF fp32 (all prompts), and the prompts whose comparison stopped early "
          "at an fp64 near-tie (margin < 2 * tolerance) or diverged outside one (a failure).", "",
          "| dump | kind | max vs fp64 | max vs HF fp32 | / tolerance | greedy steps agreed | near-tie stops | "
          "divergences | problems |",
          "|---|---|---|---|---|---|---|---|---|"]
    for name, e in report["dumps"].items():
        agreed = sum(r["agreed_steps"] for r in e["greedy"])
        ties = sum(bool(r["stopped_at"] and r["stopped_at"]["near_tie"]) for r in e["greedy"])
        diverged = sum(r["rule_broken"] for r in e["greedy"])
        md.append(f"| {name} | {e['kind']} | {e['max_abs_vs_fp64']:.3g} | {e['max_abs_vs_hf_fp32']:.3g} | "
                  f"{e['max_diff_over_tolerance']:.3g} | {agreed}/{len(prompts) * args.new_tokens} | {ties} | "
                  f"{diverged} | {'; '.join(e['problems']) or 'none'} |")
    open(os.path.join(args.out_dir, "parity.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
