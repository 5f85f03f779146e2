#!/usr/bin/env python3
"""CPU side-by-side benchmark: runs cpu-step-bench for each engine build, alternating, and writes
JSON + markdown with medians and the decode memory-bandwidth floor.

    benchmarks/cpu/cpu_bench.py --model DIR --engine new=bazel-bin/benchmarks/cpu/cpu-step-bench \
        [--engine old=/tmp/cpu-step-bench-old] \
        [--engine "int8=bazel-bin/benchmarks/cpu/cpu-step-bench --quantize int8"] [--runs 5] \
        [--threads 2] [--prompt-tokens 128] [--decode-tokens 32] [--batch 8] \
        --out-prefix benchmarks/results/DATE-cpu-560m [--machine TEXT] [--commit SHA]

An "engine" is a label and a cpu-step-bench binary (e.g. two builds of Blossom: the old and the
new kernel), optionally followed by extra flags for it (e.g. --quantize int8). Runs alternate
engines (A B A B ...) so that load from other processes on a shared machine hits all of them
alike; each number reported is the median over runs. Peer engines (llama.cpp, CTranslate2,
transformers) are compared by peer_bench.py. Standard library only.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

METRICS = ("prefill_ms", "decode_ms_per_token", "batch_tokens_per_s", "read_bandwidth_gbs")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_once(command, args):
    binary = command[0]
    cmd = list(command) + ["--model", args.model, "--threads", str(args.threads),
           "--prompt-tokens", str(args.prompt_tokens), "--decode-tokens", str(args.decode_tokens),
           "--batch", str(args.batch), "--bandwidth-mib", str(args.bandwidth_mib)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("no JSON from %s: %s" % (binary, out.stderr[-2000:]))
    return json.loads(lines[-1])


def summarize(runs):
    med = {m: statistics.median(r[m] for r in runs) for m in METRICS}
    first = runs[0]
    bw = med["read_bandwidth_gbs"]
    # The bytes a decode step reads (older binaries report only weight_bytes).
    read_bytes = first.get("decode_read_bytes", first["weight_bytes"])
    floor_ms = read_bytes / (bw * 1e9) * 1e3 if bw > 0 else None
    return {
        "weight_dtype": first["weight_dtype"],
        "quantize": first.get("quantize", "none"),
        "weight_bytes": first["weight_bytes"],
        "median": med,
        "min_max": {m: [min(r[m] for r in runs), max(r[m] for r in runs)] for m in METRICS},
        "decode_floor_ms": floor_ms,
        "decode_vs_floor": (med["decode_ms_per_token"] / floor_ms) if floor_ms else None,
        "runs": runs,
    }


def markdown(report):
    s = report["settings"]
    lines = [
        "# CPU step benchmark, %s" % report["date_utc"],
        "",
        "- machine: %s (%s)" % (report["machine"], report["cpu"]),
        "- commit: %s" % report["commit"],
        "- model: `%s`" % s["model"],
        "- command: `%s`" % report["command"],
        "- %d runs per engine, alternating; medians (min to max in brackets); %d threads" % (
            s["runs"], s["threads"]),
        "- decode: batch 1 after a %d-token prompt, median of its %d decode steps (the first of "
        "%d new tokens comes from the prefill); batch %d: decode tokens/s (16-token prompts)" % (
            s["prompt_tokens"], s["decode_tokens"] - 1, s["decode_tokens"], s["batch"]),
        "- floor: weight bytes / measured read bandwidth (one multi-threaded read of a buffer as large "
        "as the weights a decode step reads, unless --bandwidth-mib says otherwise; bytes read only)",
        "",
        "| engine | weights | decode ms/token, batch 1 | floor ms | x floor | %d-token prefill, ms "
        "| batch %d tokens/s |" % (s["prompt_tokens"], s["batch"]),
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in report["engines"].items():
        m, r = e["median"], e["min_max"]
        lines.append("| %s | %s | %.1f [%.1f to %.1f] | %s | %s | %.0f [%.0f to %.0f] | %.1f [%.1f to %.1f] |" % (
            name, e["weight_dtype"] + ("" if e["quantize"] == "none" else " / " + e["quantize"]),
            m["decode_ms_per_token"], *r["decode_ms_per_token"],
            "%.1f" % e["decode_floor_ms"] if e["decode_floor_ms"] else "-",
            "%.2f" % e["decode_vs_floor"] if e["decode_vs_floor"] else "-",
            m["prefill_ms"], *r["prefill_ms"], m["batch_tokens_per_s"], *r["batch_tokens_per_s"]))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--engine", action="append", required=True,
                   help="LABEL=PATH to cpu-step-bench, optionally followed by flags for it")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--bandwidth-mib", type=int, default=-1,
                   help="read-bandwidth probe buffer in MiB; -1: as large as the weights a decode "
                        "step reads (cpu-step-bench)")
    p.add_argument("--out-prefix", required=True, help="writes PREFIX.json and PREFIX.md")
    p.add_argument("--machine", default="")
    p.add_argument("--commit", default="")
    args = p.parse_args()

    engines = []
    for e in args.engine:
        label, _, command = e.partition("=")
        command = shlex.split(command)
        if not command or not os.access(command[0], os.X_OK):
            p.error("--engine %s: want LABEL=PATH to an executable [FLAGS]" % e)
        engines.append((label, command))
    runs = {label: [] for label, _ in engines}
    for i in range(args.runs):
        order = engines if i % 2 == 0 else engines[::-1]
        for label, command in order:
            r = run_once(command, args)
            runs[label].append(r)
            print("run %d %s: %s" % (i + 1, label, json.dumps(r)), file=sys.stderr)
    report = {
        "schema": "blossom-cpu-bench/1",
        "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "commit": args.commit,
        "machine": args.machine,
        "cpu": cpu_name(),
        "settings": {k: getattr(args, k) for k in ("model", "runs", "threads", "prompt_tokens",
                                                   "decode_tokens", "batch")},
        "engines": {label: summarize(runs[label]) for label, _ in engines},
    }
    with open(args.out_prefix + ".json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    md = markdown(report)
    with open(args.out_prefix + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
