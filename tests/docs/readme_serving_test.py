"""The README's "Serving" section, run as a newcomer would run it.

- The by-hand commands: every `bazel-bin/PATH` they run must be a file that the `bazel build`
  line of the same block builds (the data of this test holds exactly those targets, so a path
  that Bazel does not produce, such as bazel-bin/clients/blossom-gateway for the alias
  //clients:blossom-gateway, is missing from the runfiles and fails here). Then the server and
  gateway commands run as written (ports 8033/8080/9090 replaced by free ones), the README's curl
  command gets a completion through the gateway, and SIGTERM stops both with status 0.
- `tools/serve_demo.sh` (with the test's prebuilt binaries): ready, a completion through the
  gateway, then Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to
  the script alone stops both processes and the script exits 0; a process that dies on its own
  makes the script stop the other and exit 1.
- The series deploy/'s alert rules and dashboard query are in the live server's /metrics.
"""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import unittest
import urllib.request

OUT_DIR = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "/tmp")


def workspace_root():
    """The runfiles directory of this workspace (README.md, tools/, bazel outputs by path)."""
    for root in (os.environ.get("TEST_SRCDIR", ""), os.getcwd()):
        for candidate in (os.path.join(root, "blossom"), root):
            if os.path.exists(os.path.join(candidate, "README.md")):
                return os.path.abspath(candidate)
    raise FileNotFoundError("README.md in the runfiles")


ROOT = workspace_root()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving_blocks():
    """The indented code blocks of the README's '## Serving' section, as lists of lines."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Serving\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        raise AssertionError("README.md has no '## Serving' section")
    blocks, current = [], []
    for line in m.group(1).splitlines():
        if line.startswith("    "):
            current.append(line[4:])
        elif current and line.strip() == "":
            continue
        else:
            if current:
                blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_http_ok(url, timeout, procs=()):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args[0]} exited with {p.returncode} before {url} was up")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as e:  # connection refused, 503 while loading
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout} s: {last}")


def ports_for(text, mapping):
    for old, new in mapping.items():
        text = re.sub(rf"\b{old}\b", str(new), text)
    return text


class ReadmeServingCommandsTest(unittest.TestCase):
    def test_by_hand_commands_as_written(self):
        lines = [l for b in serving_blocks() for l in b]
        build = [l for l in lines if l.startswith("bazel build ")]
        self.assertEqual(len(build), 1, f"one 'bazel build' line expected in Serving: {lines}")
        runs = [l for l in lines if l.startswith("bazel-bin/")]
        self.assertEqual(len(runs), 2, f"a server line and a gateway line expected: {runs}")
        curl = [l for l in lines if l.startswith("curl ")]
        self.assertEqual(len(curl), 1, f"one curl line expected: {curl}")
        for run in runs:
            binary = shlex.split(run)[0][len("bazel-bin/"):]
            path = os.path.join(ROOT, binary)
            self.assertTrue(os.path.isfile(path) and os.access(path, os.X_OK),
                            f"README runs bazel-bin/{binary}, which '{build[0]}' does not produce")

        ports = {8033: free_port(), 8080: free_port(), 9090: free_port()}
        procs = []
        logs = []
        try:
            for i, run in enumerate(runs):
                argv = shlex.split(ports_for(run, ports))
                argv[0] = os.path.join(ROOT, argv[0][len("bazel-bin/"):])
                log = open(os.path.join(OUT_DIR, f"readme_cmd{i}.log"), "wb")
                logs.append(log)
                # cwd: the workspace root, so the README's relative --model path resolves.
                procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log))
            gateway_port = ports[8080]
            wait_http_ok(f"http://127.0.0.1:{gateway_port}/health", 120, procs)
            out = subprocess.run(shlex.split(ports_for(curl[0], ports)), cwd=ROOT,
                                 capture_output=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            body = json.loads(out.stdout)
            self.assertEqual(body["object"], "text_completion", body)
            self.assertTrue(body["choices"][0]["text"], body)
            self.assertGreater(body["usage"]["completion_tokens"], 0, body)
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            codes = [p.wait(timeout=60) for p in reversed(procs)]
            for log in logs:
                log.close()
        self.assertEqual(codes, [0, 0], "gateway and server exit 0 on SIGTERM")


class LiveMetricsTest(unittest.TestCase):
    """The series the alert rules and the dashboard query exist in a real server's /metrics
    (names, and the le="2.048" TTFT bucket the SLO alerts use), not only in the source."""

    def test_rules_and_dashboard_series_are_exported(self):
        run = next(l for b in serving_blocks() for l in b
                   if l.startswith("bazel-bin/server/blossom-server"))
        ports = {8033: free_port(), 8080: free_port(), 9090: free_port()}
        argv = shlex.split(ports_for(run, ports))
        argv[0] = os.path.join(ROOT, argv[0][len("bazel-bin/"):])
        log = open(os.path.join(OUT_DIR, "live_metrics_server.log"), "wb")
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log)
        try:
            wait_http_ok(f"http://127.0.0.1:{ports[9090]}/health", 120, [proc])
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[9090]}/metrics", timeout=10) as r:
                exposition = r.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
        series = set(re.findall(r"^(blossom_[a-z_]+)", exposition, re.M))
        used = set()
        for path in ("deploy/prometheus/blossom-alerts.yaml", "deploy/grafana/blossom-dashboard.json"):
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                used |= {m for m in re.findall(r"\b(blossom_[a-z_]+)", f.read())
                         if not m.startswith("blossom_gateway_")}
        self.assertTrue(used, "no blossom_ series found in the rules and dashboard")
        self.assertEqual(sorted(used - series), [],
                         "queried by deploy/ but not in the server's /metrics")
        for le in set(re.findall(r'le="([^"]+)"', open(os.path.join(
                ROOT, "deploy/prometheus/blossom-alerts.yaml"), encoding="utf-8").read())):
            # Any other labels (e.g. model_name) may come before le.
            pattern = rf'^blossom_time_to_first_token_seconds_bucket{{[^}}]*le="{re.escape(le)}"'
            self.assertTrue(re.search(pattern, exposition, re.M),
                            f'no TTFT bucket le="{le}" in the server\'s /metrics (the SLO alerts '
                            "use it; the buckets are 1 ms x 2^k)")


class ServeDemoTest(unittest.TestCase):
    def start(self):
        self.assertIn(["tools/serve_demo.sh"], serving_blocks(),
                      "the README's one command is tools/serve_demo.sh")
        self.http_port = free_port()
        env = dict(os.environ,
                   BLOSSOM_SERVER_BIN=os.path.join(ROOT, "server/blossom-server"),
                   BLOSSOM_GATEWAY_BIN=os.path.join(ROOT, "clients/gateway/blossom-gateway"))
        self.log_path = os.path.join(OUT_DIR, f"serve_demo_{self.id().split('.')[-1]}.log")
        self.log = open(self.log_path, "w+b")
        # A session of its own: its process group is what a terminal's Ctrl-C reaches.
        self.proc = subprocess.Popen(
            [os.path.join(ROOT, "tools/serve_demo.sh"), "--http-port", str(self.http_port),
             "--grpc-port", str(free_port()), "--metrics-port", str(free_port())],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self.cleanup)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = self.text()
            if "serve_demo: ready" in text:
                break
            self.assertIsNone(self.proc.poll(), f"serve_demo.sh exited early:\n{text}")
            time.sleep(0.1)
        else:
            self.fail(f"serve_demo.sh not ready in 120 s:\n{self.text()}")
        m = re.search(r"blossom-server pid (\d+), blossom-gateway pid (\d+)", self.text())
        self.assertTrue(m, self.text())
        self.server_pid, self.gateway_pid = int(m.group(1)), int(m.group(2))

    def text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def cleanup(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in (getattr(self, "server_pid", 0), getattr(self, "gateway_pid", 0)):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.log.close()

    def complete(self):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/v1/completions",
            data=json.dumps({"prompt": "The server reads", "max_tokens": 8}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            body = json.load(r)
        self.assertTrue(body["choices"][0]["text"], body)

    def assert_both_gone(self):
        for name, pid in (("blossom-server", self.server_pid),
                          ("blossom-gateway", self.gateway_pid)):
            self.assertFalse(alive(pid), f"{name} (pid {pid}) still running:\n{self.text()}")

    def test_ctrl_c_stops_both(self):
        self.start()
        self.complete()
        os.killpg(self.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        self.assertEqual(self.proc.wait(timeout=90), 0, self.text())
        self.assert_both_gone()
        self.assertIn("serve_demo: stopped", self.text())

    def test_sigterm_to_the_script_stops_both(self):
        self.start()
        self.complete()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=90), 0, self.text())
        self.assert_both_gone()

    def test_a_dead_server_stops_the_gateway(self):
        self.start()
        os.kill(self.server_pid, signal.SIGKILL)
        self.assertEqual(self.proc.wait(timeout=90), 1, self.text())
        self.assert_both_gone()
        self.assertIn("exited on its own", self.text())


if __name__ == "__main__":
    unittest.main()
