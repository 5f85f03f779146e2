#!/usr/bin/env python3
"""Writes deploy/grafana/blossom-dashboard.json, the Grafana dashboard for Blossom.

    python3 deploy/grafana/make_dashboard.py > deploy/grafana/blossom-dashboard.json

The JSON is committed (import it in Grafana, or ship it in a dashboard ConfigMap);
//deploy:grafana_dashboard_test checks that it is what this script writes, that every query
parses as PromQL (promtool) and that it names only metrics the server and gateway export.
Every query aggregates with `sum by (...)`/`max by (...)`, so extra labels (pod, model_name)
never split a line.
"""
import json

SEL = 'namespace=~"$namespace", job=~"$job"'
RATE = "$__rate_interval"


def q(expr, legend, ref):
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
            "legendFormat": legend, "refId": ref}


def quantiles(metric, by="", qs=(0.5, 0.9, 0.99)):
    extra = f", {by}" if by else ""
    label = f"{{{{{by}}}}} " if by else ""
    return [q(f"histogram_quantile({x}, sum by (le{extra}) "
              f"(rate({metric}_bucket{{{SEL}}}[{RATE}])))", f"{label}p{int(x * 100)}", chr(65 + i))
            for i, x in enumerate(qs)]


PANELS = [
    ("Time to first token (TTFT)", "s", quantiles("blossom_time_to_first_token_seconds")),
    ("Inter-token latency (ITL)", "s", quantiles("blossom_inter_token_latency_seconds")),
    ("Throughput: tokens per second", "short", [
        q(f"sum(rate(blossom_generation_tokens_total{{{SEL}}}[{RATE}]))", "generated", "A"),
        q(f"sum(rate(blossom_prompt_tokens_total{{{SEL}}}[{RATE}]))", "prompt", "B"),
    ]),
    ("Requests per second by outcome", "reqps", [
        q(f"sum by (outcome) (rate(blossom_requests_total{{{SEL}}}[{RATE}]))", "{{outcome}}", "A"),
    ]),
    ("Queue: running and waiting requests", "short", [
        q(f"sum(blossom_num_requests_running{{{SEL}}})", "running", "A"),
        q(f"sum(blossom_num_requests_waiting{{{SEL}}})", "waiting", "B"),
    ]),
    ("Queue time", "s", quantiles("blossom_request_queue_time_seconds")),
    ("KV cache usage", "percentunit", [
        q(f"max by (pod) (blossom_kv_cache_usage_ratio{{{SEL}}})", "{{pod}}", "A"),
    ]),
    ("Preemptions per second", "short", [
        q(f"sum by (pod) (rate(blossom_preemptions_total{{{SEL}}}[{RATE}]))", "{{pod}}", "A"),
    ]),
    ("Prefix-cache hit rate (prompt tokens)", "percentunit", [
        q(f"sum(rate(blossom_prefix_cache_hits_total{{{SEL}}}[{RATE}])) / "
          f"sum(rate(blossom_prefix_cache_queries_total{{{SEL}}}[{RATE}]))", "hit rate", "A"),
    ]),
    ("Errors by code", "reqps", [
        q(f'sum by (outcome) (rate(blossom_requests_total{{{SEL}, outcome!="finished"}}[{RATE}]))',
          "server {{outcome}}", "A"),
        q(f'sum by (status) (rate(blossom_gateway_requests_total{{{SEL}, status!~"2.."}}[{RATE}]))',
          "gateway HTTP {{status}}", "B"),
    ]),
    ("Step time by phase (p50, p99)", "s",
     quantiles("blossom_step_duration_seconds", by="phase", qs=(0.5, 0.99))),
    ("Steps per second by phase", "short", [
        q(f"sum by (phase) (rate(blossom_steps_total{{{SEL}}}[{RATE}]))", "{{phase}}", "A"),
    ]),
    ("Batch size (sequences per step)", "short", quantiles("blossom_batch_size", qs=(0.5, 0.99))),
    ("End-to-end request latency", "s", quantiles("blossom_e2e_request_latency_seconds")),
    ("Engine host time per step, share of the step (schedule, sample, output)", "percentunit", [
        q(f"sum by (part) (rate(blossom_step_host_seconds_sum{{{SEL}}}[{RATE}])) / "
          f"ignoring (part) group_left sum(rate(blossom_step_duration_seconds_sum{{{SEL}}}[{RATE}]))",
          "{{part}}", "A"),
    ]),
    ("Speculative decoding: share of draft tokens accepted", "percentunit", [
        q(f"sum(rate(blossom_spec_decode_accepted_tokens_total{{{SEL}}}[{RATE}])) / "
          f"sum(rate(blossom_spec_decode_draft_tokens_total{{{SEL}}}[{RATE}]))", "accepted", "A"),
    ]),
    ("Gateway: requests in flight and client disconnects", "short", [
        q(f"sum(blossom_gateway_requests_in_flight{{{SEL}}})", "in flight", "A"),
        q(f"sum(rate(blossom_gateway_client_disconnects_total{{{SEL}}}[{RATE}]))",
          "disconnects/s", "B"),
    ]),
]


def dashboard():
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}},
            "targets": targets,
        })

    def variable(name, query):
        return {"name": name, "label": name, "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": query, "refId": f"{name}-query"},
                "definition": query, "refresh": 2, "includeAll": True, "multi": True,
                "allValue": ".*", "current": {"text": "All", "value": "$__all"}}

    return {
        "uid": "blossom-serving",
        "title": "Blossom serving",
        "description": "blossom-server and blossom-gateway: latency, throughput, queue, KV cache, "
                       "errors, engine steps. Generated by deploy/grafana/make_dashboard.py.",
        "tags": ["blossom", "llm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}},
            variable("namespace", "label_values(blossom_num_requests_running, namespace)"),
            variable("job", 'label_values(blossom_num_requests_running{namespace=~"$namespace"}, job)'),
        ]},
        "panels": panels,
    }


if __name__ == "__main__":
    print(json.dumps(dashboard(), indent=2))
