#!/usr/bin/env python3
"""Beam search on the CPU, side by side with Hugging Face transformers: the same beams, and the
time each takes.

Runs transformers' generate(num_beams=k, do_sample=False) in this process and Blossom's
`blossom generate --num_beams k` (the in-process engine: each search step is a round of
one-token requests, one per beam, the beams' KV blocks kept by the prefix cache) on one
checkpoint, alternating the two run by run (order reversed every other run), and reports the
median search time of each and their ratio. Every run's beams are compared, token id for token
id (the CLI's --show_token_ids), with transformers' returned sequences.

Needs torch and transformers (tests/fixtures/setup_env.sh makes .venv-fixtures; or the peers'
venv of benchmarks/cpu/peers/setup_peers.sh). Blossom's time is the search alone (the CLI's
"beam search: ... ms" line; the model load is left out, as transformers' is).

  .venv-fixtures/bin/python benchmarks/cpu/beam_bench.py --blossom bazel-bin/clients/blossom \\
      --model DIR [--beams 4] [--max-new-tokens 32] [--runs 3] [--threads 2] [--out PREFIX]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

LINE_SEARCH = re.compile(r"beam search: (\d+) beams, prompt (\d+) tokens, (\d+) steps "
                         r"\((\d+) tokens computed, (\d+) from the prefix cache\), ([\d.]+) ms")
DEFAULT_PROMPT = ("The library closes at six o'clock on weekdays and at noon on Saturdays. "
                  "Read the manual before you install the software, then restart the server "
                  "and check that every service answers.")


def blossom_run(args):
    cmd = [args.blossom, "generate", "--model", args.model, "--prompt", args.prompt,
           "--num_beams", str(args.beams), "--num_return_sequences", str(args.beams),
           "--max_new_tokens", str(args.max_new_tokens), "--threads", str(args.threads),
           "--show_token_ids"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    m = LINE_SEARCH.search(proc.stderr)
    if m is None:
        sys.exit(f"no beam-search line in the output of {' '.join(cmd)}:\n{proc.stderr[-2000:]}")
    beams = [[int(t) for t in line.split(" token_ids=", 1)[1].split(",") if t]
             for line in proc.stdout.split("\n") if line.startswith("# beam ")]
    return {"ms": float(m.group(6)), "steps": int(m.group(3)), "computed": int(m.group(4)),
            "cached": int(m.group(5)), "prompt_tokens": int(m.group(2)), "beams": beams}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blossom", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--out", default="", help="write PREFIX.json and PREFIX.md")
    args = p.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import transformers
    from transformers import AutoTokenizer, BloomForCausalLM, GenerationConfig
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = BloomForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    ids = tok.encode(args.prompt)
    eos = model.config.eos_token_id
    cfg = GenerationConfig(do_sample=False, num_beams=args.beams, num_return_sequences=args.beams,
                           max_new_tokens=args.max_new_tokens, early_stopping=False,
                           length_penalty=1.0, eos_token_id=model.config.eos_token_id,
                           pad_token_id=model.config.pad_token_id, use_cache=True)

    def hf_run():
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]),
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 generation_config=cfg)
        ms = (time.perf_counter() - start) * 1000.0
        beams = []
        for row in out.tolist():
            new = row[len(ids):]
            # An end token is never continued: it ends a sequence and padding follows it.
            if eos in new:
                new = new[:new.index(eos) + 1]
            beams.append(new)
        return {"ms": ms, "beams": beams}

    runs = {"blossom": [], "transformers": []}
    for r in range(args.runs):
        order = ["blossom", "transformers"] if r % 2 == 0 else ["transformers", "blossom"]
        for engine in order:
            runs[engine].append(blossom_run(args) if engine == "blossom" else hf_run())
    same = [b["beams"] == h["beams"] for b, h in zip(runs["blossom"], runs["transformers"])]
    med = {e: statistics.median(x["ms"] for x in v) for e, v in runs.items()}
    b0 = runs["blossom"][0]
    result = {
        "schema": "blossom-cpu-beam-bench/1", "model": os.path.abspath(args.model),
        "beams": args.beams, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
        "prompt_tokens": b0["prompt_tokens"], "runs": runs, "median_ms": med,
        "speedup_over_transformers": med["transformers"] / med["blossom"],
        "same_beams_every_run": all(same), "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    lines = [
        f"# Beam search, {args.beams} beams, {args.max_new_tokens} new tokens, "
        f"{b0['prompt_tokens']}-token prompt, {args.threads} threads",
        "",
        f"model `{args.model}`; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"{args.runs} runs each, alternating",
        "",
        "| engine | median ms | runs (ms) |",
        "|---|---|---|",
    ]
    for e, v in runs.items():
        times = ", ".join("%.1f" % x["ms"] for x in v)
        lines.append(f"| {e} | {med[e]:.1f} | {times} |")
    lines += ["",
              f"Blossom / transformers speed: {result['speedup_over_transformers']:.2f}x. "
              f"Blossom's search: {b0['steps']} steps, {b0['computed']} tokens computed, "
              f"{b0['cached']} found in the prefix cache.",
              f"Same {args.beams} beams (token ids, in order) as transformers in every run: "
              f"{'yes' if all(same) else 'NO: ' + str(same)}."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(report)
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
