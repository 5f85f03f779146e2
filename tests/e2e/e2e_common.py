"""What the end-to-end test files share: the model and API key the tests use, the server and
gateway that each test module starts once (start_shared / stop_shared, from its setUpModule and
tearDownModule), and small HTTP, metrics and gRPC helpers. Not a test file itself (the runner
collects *_test.py only).
"""
import os
import tempfile
import urllib.error
import urllib.request

import blossom_client

from procs import runfile, start_gateway, start_server, wait_until

CLI = runfile("clients/blossom")
MODEL = "bloom-tiny-h4"
API_KEY = "e2e-key-5b1f0c"
# The shared server and gateway (the gateway with API keys on): set by start_shared().
SRV = GW = KEYS_FILE = None


def metric(server, name):
    """The value of a sample in the server's /metrics with no labels but model_name."""
    with urllib.request.urlopen(server.metrics + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(f'{name}{{model_name="{MODEL}"}} '):
                return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def http_status(url, timeout=10, context=None):
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def wait_idle(server):
    wait_until(lambda: metric(server, "blossom_kv_cache_blocks_used") == 0
               and metric(server, "blossom_num_requests_running") == 0
               and metric(server, "blossom_num_requests_waiting") == 0,
               timeout=30, what="zero KV blocks in use")


def start_shared():
    """Starts the server and the keyed gateway that a test module's tests share."""
    global SRV, GW, KEYS_FILE
    SRV = start_server("server")
    KEYS_FILE = os.path.join(tempfile.mkdtemp(), "keys.txt")
    with open(KEYS_FILE, "w") as f:
        f.write(f"# e2e keys\n{API_KEY}\nsecond-key\n")
    GW = start_gateway("gateway", SRV, "--api_keys_file", KEYS_FILE)
    return SRV, GW


def stop_shared():
    GW.stop()
    SRV.stop()


def auth():
    return {"Authorization": f"Bearer {API_KEY}"}


def grpc_greedy(prompt, n, **kw):
    with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
        return c.generate(prompt, max_new_tokens=n, temperature=0.0, **kw)

