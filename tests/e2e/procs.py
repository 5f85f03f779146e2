"""Starting and stopping the real binaries for the end-to-end tests.

Each process gets ephemeral ports (it prints them on one stdout line), its output goes to a log
file under the test's undeclared-outputs directory (so a failure can be read afterwards), and
stop() sends SIGTERM and waits, killing only as a last resort.
"""
import os
import re
import signal
import socket
import subprocess
import threading
import time

OUT_DIR = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "/tmp")


def runfile(relative):
    """Absolute path of a data dependency (`relative` to the workspace root)."""
    for root in (os.environ.get("TEST_SRCDIR", ""), os.getcwd()):
        for candidate in (os.path.join(root, "blossom", relative), os.path.join(root, relative)):
            if os.path.exists(candidate):
                return os.path.abspath(candidate)
    raise FileNotFoundError(relative)


class Process:
    """A child process whose stdout is scanned for a readiness line and logged."""

    def __init__(self, name, args, ready_pattern, timeout=60.0, env=None):
        self.name = name
        self.log_path = os.path.join(OUT_DIR, f"{name}.log")
        self._log = open(self.log_path, "ab", buffering=0)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log,
                                     env=env or os.environ.copy())
        self.match = None
        self._ready = threading.Event()
        self._pattern = re.compile(ready_pattern)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        if not self._ready.wait(timeout) or self.match is None:
            self.kill()
            raise RuntimeError(f"{name} did not become ready; see {self.log_path}:\n"
                               + self.tail())

    def _pump(self):
        for line in self.proc.stdout:
            self._log.write(line)
            if self.match is None:
                m = self._pattern.search(line.decode("utf-8", "replace"))
                if m:
                    self.match = m
                    self._ready.set()
        self._ready.set()

    def tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Signals the process and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until(predicate, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as e:  # the server may still be starting
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


SERVER = runfile("server/blossom-server")
GATEWAY = runfile("clients/gateway/blossom-gateway")
MODEL_DIR = runfile("tests/fixtures/models/bloom-tiny-h4")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(name, *extra, credentials=None, host="127.0.0.1", model_dir=MODEL_DIR):
    """blossom-server on `model_dir` (default: the tiny fixture model) with ephemeral ports, once
    its health is SERVING."""
    import blossom_client  # from the e2e venv; imported here so procs.py loads without it

    proc = Process(name, [SERVER, "--model", model_dir, "--host", "127.0.0.1", "--port", "0",
                          "--metrics_port", "0", "--threads", "1", "--max_input_tokens", "256",
                          "--max_total_tokens", "1024", *extra],
                   r"grpc_port=(\d+) metrics_port=(-?\d+)")
    proc.grpc = f"{host}:{proc.match.group(1)}"
    proc.metrics = f"http://127.0.0.1:{proc.match.group(2)}"
    client = blossom_client.BlossomClient(proc.grpc, timeout=5, credentials=credentials)
    wait_until(lambda: client.health() == "SERVING", what=f"{name} health SERVING")
    client.close()
    return proc


def start_gateway(name, server, *extra):
    """blossom-gateway in front of `server`, on an ephemeral port (proc.url)."""
    proc = Process(name, [GATEWAY, "--host", "127.0.0.1", "--port", "0", "--backend", server.grpc,
                          *extra], r"listening on [^ ]*:(\d+)")
    proc.url = f"http://127.0.0.1:{proc.match.group(1)}"
    return proc
