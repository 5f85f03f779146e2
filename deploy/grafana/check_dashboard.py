#!/usr/bin/env python3
"""Checks deploy/grafana/blossom-dashboard.json (standard library + promtool).

    check_dashboard.py --dashboard JSON --generator make_dashboard.py --promtool PROMTOOL \
        --metrics-source server/server_metrics.cc --metrics-source clients/gateway/metrics.cc

1. The JSON is what make_dashboard.py writes (no hand edits that the generator would lose).
2. Structure: uid, title, unique panel ids, a gridPos, a Prometheus datasource and targets with
   an expr and a unique refId on every panel.
3. The issue's panels are there, each querying its metric: TTFT and ITL percentiles,
   throughput, queue, KV usage, preemptions, prefix-cache hit rate, errors by code, step time
   by phase.
4. Every query, with Grafana's variables replaced as Grafana would ($__rate_interval -> 5m,
   $namespace/$job -> .*), parses as PromQL: they are written into a rules file that
   `promtool check rules` must accept; the variables' label_values() name exported metrics.
5. Every blossom_* metric a query names is one the server or the gateway exports.
Prints one line per finding; exits 1 if there is any.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REQUIRED = {  # panel title word -> a metric its queries must use
    "TTFT": "blossom_time_to_first_token_seconds_bucket",
    "ITL": "blossom_inter_token_latency_seconds_bucket",
    "Throughput": "blossom_generation_tokens_total",
    "Queue: running and waiting": "blossom_num_requests_waiting",
    "KV cache usage": "blossom_kv_cache_usage_ratio",
    "Preemptions": "blossom_preemptions_total",
    "Prefix-cache hit rate": "blossom_prefix_cache_hits_total",
    "Errors by code": "blossom_requests_total",
    "Step time by phase": "blossom_step_duration_seconds_bucket",
}
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                "$namespace": ".*", "$job": ".*"}


def substitute(expr):
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    return expr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dashboard", required=True)
    p.add_argument("--generator", required=True)
    p.add_argument("--promtool", required=True)
    p.add_argument("--metrics-source", action="append", default=[])
    a = p.parse_args()
    findings = []
    with open(a.dashboard, encoding="utf-8") as f:
        text = f.read()
    d = json.loads(text)
    gen = subprocess.run([sys.executable, a.generator], capture_output=True, text=True)
    if gen.returncode != 0 or json.loads(gen.stdout) != d:
        findings.append("the dashboard JSON differs from make_dashboard.py's output (regenerate: "
                        "python3 deploy/grafana/make_dashboard.py > deploy/grafana/blossom-dashboard.json)")

    exported = set()
    for src in a.metrics_source:
        with open(src, encoding="utf-8") as f:
            exported |= set(re.findall(r'"(?:# TYPE )?(blossom_[a-z_]+)', f.read()))

    for field in ("uid", "title", "panels", "schemaVersion"):
        if not d.get(field):
            findings.append(f"dashboard has no {field}")
    ids = [pnl.get("id") for pnl in d.get("panels", [])]
    if len(ids) != len(set(ids)) or None in ids:
        findings.append(f"panel ids are missing or repeated: {ids}")
    exprs = []  # (panel title, refId, expr)
    for pnl in d.get("panels", []):
        title = pnl.get("title", "?")
        if not {"h", "w", "x", "y"} <= set(pnl.get("gridPos", {})):
            findings.append(f"panel {title!r}: no complete gridPos")
        if pnl.get("datasource", {}).get("type") != "prometheus":
            findings.append(f"panel {title!r}: datasource is not Prometheus")
        refs = [t.get("refId") for t in pnl.get("targets", [])]
        if not refs or len(refs) != len(set(refs)) or None in refs:
            findings.append(f"panel {title!r}: targets need unique refIds: {refs}")
        for t in pnl.get("targets", []):
            if not t.get("expr"):
                findings.append(f"panel {title!r} target {t.get('refId')}: no expr")
            else:
                exprs.append((title, t.get("refId"), t["expr"]))

    for word, metric in REQUIRED.items():
        panels = [(t, e) for t, _, e in exprs if word.lower() in t.lower()]
        if not panels:
            findings.append(f"no panel titled with {word!r}")
        elif not any(re.search(rf"\b{metric}\b", e) for _, e in panels):
            findings.append(f"the {word!r} panel does not query {metric}")
    for word in ("TTFT", "ITL"):
        qs = {m for t, _, e in exprs if word in t for m in re.findall(r"histogram_quantile\(([\d.]+)", e)}
        if not {"0.5", "0.9", "0.99"} <= qs:
            findings.append(f"the {word} panel lacks p50/p90/p99 (has {sorted(qs)})")

    variables = d.get("templating", {}).get("list", [])
    for v in variables:
        if v.get("type") == "query":
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.match(r"label_values\((\w+)", query)
            if not m or m.group(1) not in exported:
                findings.append(f"variable {v['name']}: {query} names no exported metric")

    for title, ref, e in exprs:
        for name in re.findall(r"\b(blossom_[a-z_]+)", e):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            if name not in exported and base not in exported:
                findings.append(f"panel {title!r} {ref}: {name} is not exported by the server "
                                "or the gateway")

    with tempfile.TemporaryDirectory() as tmp:
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:panel_{i}", "expr": substitute(e)}
            for i, (_, _, e) in enumerate(exprs)]}]}
        path = os.path.join(tmp, "dashboard-rules.yaml")
        with open(path, "w") as f:
            json.dump(rules, f)  # JSON is YAML
        r = subprocess.run([a.promtool, "check", "rules", path], capture_output=True, text=True)
        if r.returncode != 0:
            findings.append("promtool check rules rejects a dashboard query:\n"
                            + (r.stdout + r.stderr).strip())
        else:
            print(r.stdout.strip())
    for f in findings:
        print("FAIL:", f)
    print(f"check_dashboard: {len(d.get('panels', []))} panels, {len(exprs)} queries, "
          f"{len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
