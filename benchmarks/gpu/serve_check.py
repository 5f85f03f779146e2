#!/usr/bin/env python3
"""Serving correctness under load with cancellations, through the HTTP gateway (stdlib only).

Sends --requests OpenAI streaming completions (/v1/completions, stream=true) with at most
--concurrency in flight, cycling through --kinds of request so that every path of the server's
sampler runs under load (on a GPU: the device sampler's kernels):
  greedy     temperature 0
  sampled    temperature, top_p, top_k and a seed
  penalized  presence, frequency and repetition penalties, min_p, a seed
  logprobs   logprobs 5: every token's logprob and its alternatives
  biased     logit_bias +100 on one token (found with /tokenize): every token must be it
  regex      guided_regex "(yes|no)" without ignore_eos: the output must be one of the two,
             ended by EOS (finish_reason "stop")
The first five run with ignore_eos and an exact max_tokens; a seeded --cancel-fraction of them is
dropped by the client after a random number of streamed chunks. Then checks what a user and an
operator must see:
- every request that was not cancelled got HTTP 200, a stream ending in [DONE], and its kind's
  outcome: exactly max_tokens tokens (usage.completion_tokens) and finish_reason "length", with
  valid logprobs (finite, <= 0, at most 6 entries in each top_logprobs) and the biased token
  alone where asked; the regex's answer and "stop";
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


KINDS = ("greedy", "sampled", "penalized", "logprobs", "biased", "regex")
REGEX_ANSWERS = ("yes", "no")


def request_body(args, kind, index):
    body = {"model": args.model, "prompt": f"Request {index}: the garden in spring is", "max_tokens": args.max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}}
    if kind == "sampled":
        body.update(temperature=0.8, top_p=0.9, top_k=40, seed=index)
    elif kind == "penalized":
        body.update(temperature=0.7, seed=index, presence_penalty=0.6, frequency_penalty=0.4,
                    repetition_penalty=1.2, min_p=0.05)
    elif kind == "logprobs":
        body.update(logprobs=5)
    elif kind == "biased":
        body.update(logit_bias={str(args.bias_token[0]): 100})
    elif kind == "regex":
        body.update(guided_regex="|".join(REGEX_ANSWERS), max_tokens=8, ignore_eos=False)
    return body


def logprob_problem(logprobs):
    """What is wrong with one streamed choice's completions-API logprobs, or None."""
    for value in logprobs.get("token_logprobs") or []:
        if value is None or not (-1e30 < value <= 1e-6):
            return f"token logprob {value}"
    for top in logprobs.get("top_logprobs") or []:
        if top is None or len(top) > 6 or any(not (-1e30 < v <= 1e-6) for v in top.values()):
            return f"top_logprobs {top}"
    return None


def one_request(args, index, kind, cancel_after, results):
    body = request_body(args, kind, index)
    record = {"index": index, "kind": kind, "cancel_after": cancel_after, "status": None, "chunks": 0,
              "done": False, "completion_tokens": None, "finish_reason": None, "error": None, "text": "",
              "logprob_problem": None, "logprob_tokens": 0}
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
                    record["text"] += choice["text"]
                if choice.get("logprobs"):
                    record["logprob_tokens"] += len(choice["logprobs"].get("token_logprobs") or [])
                    record["logprob_problem"] = record["logprob_problem"] or logprob_problem(choice["logprobs"])
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


def outcome_problem(args, r):
    """What is wrong with a finished (not cancelled) request's outcome for its kind, or None."""
    if r["kind"] == "regex":
        if r["finish_reason"] != "stop" or r["text"] not in REGEX_ANSWERS:
            return f"text {r['text']!r}, finish {r['finish_reason']} (expected one of {REGEX_ANSWERS}, stop)"
        return None
    if r["completion_tokens"] != args.max_tokens or r["finish_reason"] != "length":
        return f"{r['completion_tokens']} tokens, finish {r['finish_reason']} (expected {args.max_tokens}, length)"
    if r["kind"] == "logprobs":
        if r["logprob_problem"]:
            return r["logprob_problem"]
        if r["logprob_tokens"] != args.max_tokens:
            return f"logprobs for {r['logprob_tokens']} of {args.max_tokens} tokens"
    if r["kind"] == "biased" and r["text"] != args.bias_token[1] * args.max_tokens:
        return f"text {r['text'][:80]!r}: not {args.max_tokens} x the biased token {args.bias_token[1]!r}"
    return None


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
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"the request kinds to cycle through (default: all of {', '.join(KINDS)})")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        ap.error(f"--kinds: unknown {unknown}; choose from {', '.join(KINDS)}")

    if not args.model:
        conn = http.client.HTTPConnection(args.host, args.port, timeout=30)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key} if args.api_key else {})
        args.model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    if "biased" in kinds:
        # The biased token: the first of " the" in the server's tokenizer (TGI's /tokenize gives
        # each token's id and its text, the input between its offsets).
        conn = http.client.HTTPConnection(args.host, args.port, timeout=30)
        headers = {"Content-Type": "application/json"}
        if args.api_key:
            headers["Authorization"] = "Bearer " + args.api_key
        conn.request("POST", "/tokenize", body=json.dumps({"inputs": " the"}), headers=headers)
        first = json.loads(conn.getresponse().read())[0]
        conn.close()
        args.bias_token = (first["id"], first["text"])
    rng = random.Random(args.seed)
    kind_of = [kinds[i % len(kinds)] for i in range(args.requests)]
    # Cancellations only where the output runs to max_tokens (a regex answer is a few tokens).
    plan = [rng.randint(1, max(1, args.max_tokens // 2))
            if rng.random() < args.cancel_fraction and kind_of[i] != "regex" else 0
            for i in range(args.requests)]
    results = [None] * args.requests
    slots = threading.Semaphore(args.concurrency)
    threads = []
    t0 = time.monotonic()

    def run(i):
        try:
            one_request(args, i, kind_of[i], plan[i], results)
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
    completed_by_kind = {}
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
        elif (problem := outcome_problem(args, r)) is not None:
            problems.append(f"request {r['index']} ({r['kind']}): {problem}")
        else:
            completed += 1
            completed_by_kind[r["kind"]] = completed_by_kind.get(r["kind"], 0) + 1

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
              "kinds": kinds, "completed_by_kind": completed_by_kind,
              "planned_cancels": sum(1 for c in plan if c), "cancelled": cancelled, "completed": completed,
              "wall_s": wall,
              "generated_tokens_per_s": sum(r["completion_tokens"] or 0 for r in results
                                            if r and not r.get("cancelled")) / wall if wall > 0 else 0,
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
