#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel name: where a run's GPU time goes.

Usage: ncu_summary.py PROFILE.csv [--top N] > profile.md

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
    plain = name.replace("(anonymous namespace)", "anon")
    cut = min((i for i in (plain.find("<"), plain.find("(")) if i >= 0), default=len(plain))
    base = plain[:cut].strip().split(" ")[-1]
    return base.split("::")[-1] or name


def summarize(text):
    """Returns [(kernel, launches, total_us)] sorted by total time, descending."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") found")
    totals = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = (row.get("Metric Unit") or "").strip()
        if unit not in _UNIT_TO_US:
            raise ValueError(f"unknown time unit {unit!r}")
        value = float((row.get("Metric Value") or "0").replace(",", ""))
        name = short_name(row.get("Kernel Name", "?"))
        launches, us = totals.get(name, (0, 0.0))
        totals[name] = (launches + 1, us + value * _UNIT_TO_US[unit])
    return sorted(((k, n, us) for k, (n, us) in totals.items()), key=lambda r: -r[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv_path")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    with open(args.csv_path, encoding="utf-8", errors="replace") as f:
        rows = summarize(f.read())
    total = sum(us for _, _, us in rows) or 1.0
    print("## GPU time by kernel (ncu gpu__time_duration, summed over the run)\n")
    print(f"{sum(n for _, n, _ in rows)} launches, {total / 1e3:.3f} ms of kernel time\n")
    print("| kernel | launches | total ms | mean us | share |")
    print("|---|---|---|---|---|")
    for name, n, us in rows[: args.top]:
        print(f"| {name} | {n} | {us / 1e3:.3f} | {us / n:.1f} | {100 * us / total:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
