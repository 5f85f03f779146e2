#!/usr/bin/env python3
"""Checks deploy/prometheus/blossom-alerts.yaml (run from the workspace root; needs promtool).

1. `promtool check rules`: every expression parses, every rule is well-formed.
2. `promtool test rules blossom-alerts_test.yaml`: each alert fires (and stays quiet) on the
   synthetic series as the test file expects.
3. Every blossom_* metric the rules name is one the server or the gateway exports (read from
   server/server_metrics.cc and clients/gateway/metrics.cc), so a renamed metric fails here.
4. Every alert has a severity label and a summary annotation.
"""
import re
import subprocess
import sys

RULES = "deploy/prometheus/blossom-alerts.yaml"
TESTS = "deploy/prometheus/blossom-alerts_test.yaml"
SOURCES = ["server/server_metrics.cc", "clients/gateway/metrics.cc"]


def main():
    findings = []
    for argv in (["promtool", "check", "rules", RULES], ["promtool", "test", "rules", TESTS]):
        r = subprocess.run(argv, capture_output=True, text=True)
        print(r.stdout.strip(), r.stderr.strip())
        if r.returncode != 0:
            findings.append(f"{' '.join(argv)} failed ({r.returncode})")
    exported = set()
    for src in SOURCES:
        with open(src, encoding="utf-8") as f:
            exported |= set(re.findall(r'"(?:# TYPE )?(blossom_[a-z_]+)', f.read()))
    with open(RULES, encoding="utf-8") as f:
        text = f.read()
    exprs = "\n".join(line for line in text.splitlines()
                      if not re.match(r"\s*(#|- record:|summary:|description:)", line))
    for name in sorted(set(re.findall(r"\b(blossom_[a-z_]+)", exprs))):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        if name not in exported and base not in exported:
            findings.append(f"{RULES} uses {name}, which neither the server nor the gateway exports")
    for block in re.split(r"\n\s*- alert: ", text)[1:]:
        alert = block.split()[0]
        if "severity:" not in block or "summary:" not in block:
            findings.append(f"alert {alert} lacks a severity label or a summary annotation")
    for f in findings:
        print("FAIL:", f)
    print(f"check_rules: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
