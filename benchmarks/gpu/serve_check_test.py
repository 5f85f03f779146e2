"""serve_check.py against blossom-server (CPU backend, demo model) behind blossom-gateway.

The GPU bring-up runs serve_check.py against the CUDA server; here it runs on the CPU with small
numbers, so the script and its checks are proven before a GPU run depends on them: a clean run
passes (completions exact, cancelled streams freed, server idle after), and a run that cannot
read the server's metrics fails. Usage (Bazel): serve_check_test.py SERVER GATEWAY MODEL_DIR SCRIPT
"""
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types


def start(cmd, pattern, timeout=120):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found, lines = [], []

    def pump():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(pattern, line)
            if m and not found:
                found.append(m)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"{cmd[0]} did not start:\n{''.join(lines[-30:])}")
        time.sleep(0.1)
    return proc, found[0], lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_outcome_rules(script):
    """The per-kind checks fail what they must (a clean run alone cannot show that)."""
    spec = importlib.util.spec_from_file_location("serve_check", script)
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    args = types.SimpleNamespace(max_tokens=3, bias_token=(7, " the"))

    def record(kind, **kw):
        r = {"kind": kind, "completion_tokens": 3, "finish_reason": "length", "text": " the the the",
             "logprob_problem": None, "logprob_tokens": 3}
        r.update(kw)
        return r
    assert sc.outcome_problem(args, record("greedy")) is None
    assert sc.outcome_problem(args, record("biased")) is None
    assert sc.outcome_problem(args, record("biased", text=" the the a")) is not None
    assert sc.outcome_problem(args, record("greedy", completion_tokens=2)) is not None
    assert sc.outcome_problem(args, record("logprobs", logprob_tokens=2)) is not None
    assert sc.logprob_problem({"token_logprobs": [-0.5, 0.3]}) is not None
    assert sc.logprob_problem({"token_logprobs": [-0.5], "top_logprobs": [{"a": -0.1, "b": float("nan")}]})
    assert sc.logprob_problem({"token_logprobs": [-0.5], "top_logprobs": [{"a": -0.1, "b": -2.0}]}) is None
    assert sc.outcome_problem(args, record("regex", text="yes", finish_reason="stop")) is None
    assert sc.outcome_problem(args, record("regex", text="yes", finish_reason="length")) is not None
    assert sc.outcome_problem(args, record("regex", text="maybe", finish_reason="stop")) is not None


def main():
    server_bin, gateway_bin, model_dir, script = sys.argv[1:5]
    check_outcome_rules(script)
    server, m, server_log = start([server_bin, "--model", model_dir, "--host", "127.0.0.1", "--port", "0",
                                   "--metrics_port", "0", "--threads", "2"], r"grpc_port=(\d+) metrics_port=(\d+)")
    grpc_port, metrics_port = m.group(1), m.group(2)
    gateway = None
    try:
        deadline = time.monotonic() + 120
        while not any("serving " in line for line in server_log):
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the server never became ready:\n" + "".join(server_log[-30:]))
            time.sleep(0.2)
        gateway, g, _ = start([gateway_bin, "--host", "127.0.0.1", "--port", "0", "--backend",
                               f"127.0.0.1:{grpc_port}"], r"listening on [^ ]*:(\d+)")
        http_port = g.group(1)
        with tempfile.TemporaryDirectory() as tmp:
            report_path = os.path.join(tmp, "report.json")
            common = [sys.executable, script, "--port", http_port, "--requests", "40", "--concurrency", "8",
                      "--max-tokens", "12", "--cancel-fraction", "0.25", "--seed", "3", "--timeout-s", "120"]
            run = subprocess.run(common + ["--metrics-port", metrics_port, "--json", report_path],
                                 capture_output=True, text=True)
            print(run.stdout, run.stderr)
            assert run.returncode == 0, "serve_check.py failed on a healthy server"
            report = json.load(open(report_path))
            assert report["ok"] and report["cancelled"] >= 1 and report["completed"] >= 20, report
            assert report["cancelled"] + report["completed"] == 40, report
            # Every kind of request ran and ended as its kind must (6 kinds cycled over 40).
            assert sorted(report["completed_by_kind"]) == sorted(report["kinds"]), report
            assert len(report["kinds"]) == 6, report
            assert report["metrics_after"]["blossom_kv_cache_blocks_used"] == 0, report
            # Planted: the server's metrics cannot be read, so idleness cannot be shown.
            bad = subprocess.run(common + ["--metrics-port", str(free_port()), "--drain-s", "1"],
                                 capture_output=True, text=True)
            assert bad.returncode == 1 and "blossom_kv_cache_blocks_used" in bad.stdout, bad.stdout
        print("PASS")
    finally:
        for p in (gateway, server):
            if p is not None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
