#!/usr/bin/env python3
"""Serving correctness under load with cancellations, through the HTTP gateway (stdlib only).

Sends --requests OpenAI streaming completions (/v1/completions, stream=true, ignore_eos, exact
max_tokens) with at most --concurrency in flight; a seeded --cancel-fraction of them is dropped
by the client after a random number of streamed chunks. Then checks what a user and an operator
must see:
- every request that was not cancelled got HTTP 200, a stream ending in [DONE], exactly
  max_tokens tokens (usage.completion_tokens) and finish_reason "length";
- no request failed in any other way (no 5xx, no early end, no timeout);
- afterwards the server's KV cache is empty again (blossom_kv_cache_blocks_used 0 on its
  /metrics, polled for up to --drain-s) and it reports no running or waiting requests.
Writes a JSON report (--json) and exits 1 on any violation. Used by run_bench_on_device.sh's
"servecheck" phase on the GPU (the bring-up's server step) and by
//benchmarks/gpu:serve_check_test on the CPU.
"""
import argparse
import http.client
import json
import random
import re
import sys
import threading
import time


def parse_metric(text, name):
    """Sum of every series of `name` (any labels) in a Prometheus text exposition."""
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})?\s+(\S+)", line)
        if m:
            total += float(m.group(2))
            seen = True
    return total if seen else None


def one_request(args, index, cancel_after, results):
    body = {"model": args.model, "prompt": f"Request {index}: the garden in spring is", "max_tokens": args.max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}}
    record = {"index": index, "cancel_after": cancel_after, "status": None, "chunks": 0, "done": False,
              "completion_tokens": None, "finish_reason": None, "error": None}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout_s)
    try:
        headers = {"Content-Type": "application/json"}
        if args.api_key:
            headers["Authorization"] = "Bearer " + args.api_key
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        record["status"] = resp.status
        if resp.status != 200:
            record["error"] = resp.read(2000).decode(errors="replace")
            return
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                record["done"] = True
                break
            event = json.loads(data)
            if event.get("usage"):
                record["completion_tokens"] = event["usage"].get("completion_tokens")
            for choice in event.get("choices", []):
                if choice.get("text"):
                    record["chunks"] += 1
                if choice.get("finish_reason"):
                    record["finish_reason"] = choice["finish_reason"]
            if cancel_after and record["chunks"] >= cancel_after:
                record["cancelled"] = True
                break  # the client goes away mid-stream
    except Exception as e:  # a timeout or a reset is a failure to report, not to raise
        record["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
        record["seconds"] = time.monotonic() - t0
        results[index] = record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True, help="the gateway's HTTP port")
    ap.add_argument("--metrics-port", type=int, required=True, help="the server's metrics port")
    ap.add_argument("--model", default="", help="default: the first model the gateway's /v1/models lists")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cancel-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--drain-s", type=float, default=15)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    if not args.model:
        conn = http.client.HTTPConnection(args.host, args.port, timeout=30)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key} if args.api_key else {})
        args.model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    rng = random.Random(args.seed)
    plan = [rng.randint(1, max(1, args.max_tokens // 2)) if rng.random() < args.cancel_fraction else 0
            for _ in range(args.requests)]
    results = [None] * args.requests
    slots = threading.Semaphore(args.concurrency)
    threads = []
    t0 = time.monotonic()

    def run(i):
        try:
            one_request(args, i, plan[i], results)
        finally:
            slots.release()

    for i in range(args.requests):
        slots.acquire()
        t = threading.Thread(target=run, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(args.timeout_s + 30)
    wall = time.monotonic() - t0

    problems = []
    completed = cancelled = 0
    for r in results:
        if r is None:
            problems.append("a request never finished")
            continue
        if r.get("cancelled"):
            cancelled += 1
            continue
        if r["error"] or r["status"] != 200:
            problems.append(f"request {r['index']}: status {r['status']} {r['error']}")
        elif not r["done"]:
            problems.append(f"request {r['index']}: the stream ended without [DONE] after {r['chunks']} chunks")
        elif r["completion_tokens"] != args.max_tokens or r["finish_reason"] != "length":
            problems.append(f"request {r['index']}: {r['completion_tokens']} tokens, finish {r['finish_reason']}"
                            f" (expected {args.max_tokens}, length)")
        else:
            completed += 1

    # The server must free every cancelled request's KV blocks and end up idle.
    metrics = {}
    deadline = time.monotonic() + args.drain_s
    while True:
        try:
            conn = http.client.HTTPConnection(args.host, args.metrics_port, timeout=10)
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            conn.close()
            metrics = {name: parse_metric(text, name) for name in
                       ("blossom_kv_cache_blocks_used", "blossom_num_requests_running", "blossom_num_requests_waiting")}
        except OSError as e:
            metrics = {"error": str(e)}
        idle = metrics.get("blossom_kv_cache_blocks_used") == 0 and not metrics.get("blossom_num_requests_running") \
            and not metrics.get("blossom_num_requests_waiting")
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if metrics.get("blossom_kv_cache_blocks_used") is None:
        problems.append(f"no blossom_kv_cache_blocks_used on the server's /metrics: {metrics}")
    elif not idle:
        problems.append(f"the server did not return to idle within {args.drain_s} s: {metrics}")

    latencies = sorted(r["seconds"] for r in results if r and not r.get("cancelled") and not r["error"])
    report = {"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
              "planned_cancels": sum(1 for c in plan if c), "cancelled": cancelled, "completed": completed,
              "wall_s": wall, "generated_tokens_per_s": completed * args.max_tokens / wall if wall > 0 else 0,
              "p50_request_s": latencies[len(latencies) // 2] if latencies else None,
              "metrics_after": metrics, "problems": problems[:50], "ok": not problems}
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "problems"}, indent=1))
    for p in problems[:20]:
        print("PROBLEM:", p)
    sys.exit(0 if not problems else 1)


if __name__ == "__main__":
    main()
