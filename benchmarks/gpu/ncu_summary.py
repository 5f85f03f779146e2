#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel name: where a run's GPU time goes.

Usage: ncu_summary.py PROFILE.csv [--top N] [--by-step KERNEL] > profile.md

--by-step KERNEL adds one table per step: a step starts at each launch of the kernel named KERNEL
(short name, e.g. EmbeddingVecKernel, the first kernel of every forward), so a prefill and the
decode steps after it are told apart.

PROFILE.csv is `ncu --metrics gpu__time_duration.sum --csv --log-file PROFILE.csv ...`: one row per
(kernel launch, metric), with "Kernel Name", "Metric Name", "Metric Unit" and "Metric Value"
columns (ncu may print its own "==PROF==" lines before the header; they are skipped). Kernel
names are shortened to the function's name without its template and parameter lists, so that
one kernel's instantiations sum together. Standard library only.
"""
import argparse
import csv
import io
import sys

_UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}


def short_name(name):
    """'void blossom::cuda::(anonymous namespace)::DecodeKernel<__half>(Args, float*)' -> 'DecodeKernel'."""
    plain = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    cut = min((i for i in (plain.find("<"), plain.find("(")) if i >= 0), default=len(plain))
    base = plain[:cut].strip().split(" ")[-1]
    return base.split("::")[-1] or name


def launches(text):
    """Returns [(kernel short name, us)] in launch order."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") found")
    out = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = (row.get("Metric Unit") or "").strip()
        if unit not in _UNIT_TO_US:
            raise ValueError(f"unknown time unit {unit!r}")
        value = float((row.get("Metric Value") or "0").replace(",", ""))
        out.append((short_name(row.get("Kernel Name", "?")), value * _UNIT_TO_US[unit]))
    return out


def totals_by_name(seq):
    """[(kernel, us)] -> [(kernel, launches, total_us)] sorted by total time, descending."""
    totals = {}
    for name, us in seq:
        n, total = totals.get(name, (0, 0.0))
        totals[name] = (n + 1, total + us)
    return sorted(((k, n, us) for k, (n, us) in totals.items()), key=lambda r: -r[2])


def summarize(text):
    """Returns [(kernel, launches, total_us)] sorted by total time, descending."""
    return totals_by_name(launches(text))


def split_steps(seq, first_kernel):
    """Launches grouped into steps, each starting at a launch of `first_kernel` (launches before
    the first such launch, e.g. a benchmark's own probe, are dropped)."""
    steps = []
    for name, us in seq:
        if name == first_kernel:
            steps.append([])
        if steps:
            steps[-1].append((name, us))
    return steps


def print_table(rows, top):
    total = sum(us for _, _, us in rows) or 1.0
    print(f"{sum(n for _, n, _ in rows)} launches, {total / 1e3:.3f} ms of kernel time\n")
    print("| kernel | launches | total ms | mean us | share |")
    print("|---|---|---|---|---|")
    for name, n, us in rows[:top]:
        print(f"| {name} | {n} | {us / 1e3:.3f} | {us / n:.1f} | {100 * us / total:.1f}% |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv_path")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--by-step", metavar="KERNEL", default="")
    args = parser.parse_args()
    with open(args.csv_path, encoding="utf-8", errors="replace") as f:
        seq = launches(f.read())
    print("## GPU time by kernel (ncu gpu__time_duration, summed over the run)\n")
    print_table(totals_by_name(seq), args.top)
    if args.by_step:
        for i, step in enumerate(split_steps(seq, args.by_step)):
            print(f"\n### Step {i} (from a launch of {args.by_step})\n")
            print_table(totals_by_name(step), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
