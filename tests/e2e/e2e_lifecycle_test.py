"""End-to-end tests of the serving lifecycle over loopback against the real blossom-server and
blossom-gateway: a real Prometheus server scraping /metrics, 200 concurrent streams with
disconnects, overload (fast 429s, no 5xx) and draining on SIGTERM.
"""
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import aiohttp
import blossom_client
from blossom_client import errors as blossom_errors

import e2e_common
from e2e_common import CLI, MODEL, auth, grpc_greedy, http_status, metric, wait_idle
from procs import (MODEL_DIR, SERVER, Process, free_port, runfile, start_gateway, start_server,
                   wait_until)


def port_open(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def setUpModule():
    global SRV, GW
    SRV, GW = e2e_common.start_shared()


def tearDownModule():
    e2e_common.stop_shared()


class PrometheusTest(unittest.TestCase):
    def test_prometheus_scrapes_ttft_histogram(self):
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            self.fail("the prometheus binary is missing (apt-get install prometheus)")
        for _ in range(3):
            grpc_greedy("Scrape me", 4)
        work = tempfile.mkdtemp()
        config = os.path.join(work, "prometheus.yml")
        target = SRV.metrics.replace("http://", "")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                    f"  - job_name: blossom\n    static_configs:\n      - targets: ['{target}']\n")
        port = free_port()
        proc = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={work}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            result = {}

            def ttft_buckets():
                url = (f"http://127.0.0.1:{port}/api/v1/query?query="
                       "blossom_time_to_first_token_seconds_bucket")
                with urllib.request.urlopen(url, timeout=5) as r:
                    data = json.loads(r.read())
                result["series"] = data["data"]["result"]
                return data["status"] == "success" and len(result["series"]) > 1
            wait_until(ttft_buckets, timeout=60, interval=0.5, what="Prometheus query result")
            by_le = {s["metric"]["le"]: float(s["value"][1]) for s in result["series"]}
            self.assertIn("+Inf", by_le)
            self.assertGreaterEqual(by_le["+Inf"], 3)
            self.assertEqual(result["series"][0]["metric"]["job"], "blossom")
            self.assertEqual(result["series"][0]["metric"]["model_name"], MODEL)
        finally:
            proc.terminate()
            proc.wait(10)


class ConcurrencyTest(unittest.TestCase):
    def test_200_gateway_streams_with_10_percent_disconnects(self):
        async def one(session, i):
            want = 4 + i % 9
            # ignore_eos (a Blossom and vLLM extension) makes the token count exact.
            body = {"inputs": f"Stream number {i}",
                    "parameters": {"max_new_tokens": want, "do_sample": True, "seed": i,
                                   "temperature": 0.7, "ignore_eos": True}}
            tokens = 0
            async with session.post(GW.url + "/generate_stream", json=body,
                                    headers=auth()) as r:
                self.assertEqual(r.status, 200)
                async for raw in r.content:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        json.loads(line[5:])
                        tokens += 1
                        if i % 10 == 0 and tokens == 2:
                            r.close()  # drops the connection mid-stream
                            return ("dropped", tokens, want)
            return ("done", tokens, want)

        async def run():
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            timeout = aiohttp.ClientTimeout(total=180)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                return await asyncio.gather(*(one(session, i) for i in range(200)))

        results = asyncio.run(run())
        done = [r for r in results if r[0] == "done"]
        self.assertEqual(len(done), 180)
        for _, tokens, want in done:
            self.assertEqual(tokens, want)
        wait_idle(SRV)

    def test_60_multi_choice_streams_with_disconnects(self):
        # /v1/completions streams of three choices each (two prompts and n=2 give 4; one
        # prompt and n=3 give 3), one in five dropped mid-stream: every kept one gets each
        # choice's tokens and one [DONE]; every generation of the dropped ones is cancelled
        # (the server ends idle, no KV block held).
        async def one(session, i):
            want = 4 + i % 7
            body = {"max_tokens": want, "temperature": 0.7,
                    "seed": i, "ignore_eos": True, "stream": True}
            if i % 2:
                body.update(prompt=[f"Choice stream {i}", f"and {i}"], n=2)
                choices = 4
            else:
                body.update(prompt=f"Choice stream {i}", n=3)
                choices = 3
            per_choice, done = {}, 0
            async with session.post(GW.url + "/v1/completions", json=body,
                                    headers=auth()) as r:
                self.assertEqual(r.status, 200)
                async for raw in r.content:
                    line = raw.decode().strip()
                    if not line.startswith("data:"):
                        continue
                    if line == "data: [DONE]":
                        done += 1
                        continue
                    for c in json.loads(line[5:])["choices"]:
                        if c.get("logprobs") is None and c["text"]:
                            per_choice[c["index"]] = per_choice.get(c["index"], 0) + 1
                    if i % 5 == 0 and sum(per_choice.values()) >= 3:
                        r.close()  # drops the connection mid-stream
                        return ("dropped", None, None, None)
            return ("done", per_choice, choices, want, done)

        async def run():
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            timeout = aiohttp.ClientTimeout(total=180)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                return await asyncio.gather(*(one(session, i) for i in range(60)))

        results = asyncio.run(run())
        done = [r for r in results if r[0] == "done"]
        self.assertEqual(len(done), 48)
        for _, per_choice, choices, want, dones in done:
            self.assertEqual(dones, 1)
            self.assertEqual(sorted(per_choice), list(range(choices)))
            # A chunk per token with text (a token may hold part of a character: at most want).
            for count in per_choice.values():
                self.assertLessEqual(count, want)
                self.assertGreater(count, 0)
        wait_idle(SRV)

    def test_200_grpc_streams_with_10_percent_disconnects(self):
        async def one(client, i):
            want = 3 + i % 11
            n = 0
            stream = client.generate_stream(f"gRPC stream {i}", max_new_tokens=want,
                                            temperature=0.0, ignore_eos=True)
            async for chunk in stream:
                n += chunk.token is not None
                if i % 10 == 5 and n == 2:
                    stream.cancel()  # the client cancels its call mid-stream
                    return None
            return (n, want)

        async def run():
            async with blossom_client.AsyncBlossomClient(SRV.grpc, timeout=120) as c:
                return await asyncio.gather(*(one(c, i) for i in range(200)))

        results = [r for r in asyncio.run(run()) if r is not None]
        self.assertEqual(len(results), 180)
        for n, want in results:
            self.assertEqual(n, want)
        wait_idle(SRV)


class OverloadTest(unittest.TestCase):
    def test_overload_gets_fast_429_and_no_5xx(self):
        # The tiny model decodes thousands of tokens a second on a fast CPU, so every request
        # here asks for many tokens: a request that finishes early frees its place and races
        # the overload this test builds (CI saw "timed out waiting for two waiting requests").
        server = start_server("server-overload", "--max_batch_size", "1",
                              "--max_waiting_requests", "2", "--max_total_tokens", "65536")
        gateway = start_gateway("gateway-overload", server)
        try:
            async def one(session, i):
                start = time.monotonic()
                async with session.post(gateway.url + "/generate", json={
                        "inputs": f"load {i}",
                        "parameters": {"max_new_tokens": 2000, "ignore_eos": True}}) as r:
                    await r.read()
                    return r.status, r.headers.get("Retry-After"), time.monotonic() - start

            async def run():
                connector = aiohttp.TCPConnector(limit=0, force_close=True)
                async with aiohttp.ClientSession(connector=connector) as session:
                    return await asyncio.gather(*(one(session, i) for i in range(40)))

            results = asyncio.run(run())
            statuses = [s for s, _, _ in results]
            self.assertTrue(all(s in (200, 429) for s in statuses), statuses)
            refused = [(ra, t) for s, ra, t in results if s == 429]
            self.assertGreaterEqual(len(refused), 30)
            # Admission guarantees the two waiting places; the running place is only free for a
            # third if the engine loop moved one request to running before the rest arrived, which
            # a loaded machine need not do.
            self.assertGreaterEqual(statuses.count(200), 2)
            for retry_after, seconds in refused:
                self.assertIsNotNone(retry_after)
                self.assertLess(seconds, 2.0)
            with blossom_client.BlossomClient(server.grpc, timeout=30) as c:
                # One running (max_batch_size 1) and two waiting fill the queue exactly. 60000
                # tokens hold the running place for many seconds; they are cancelled below.
                streams = [c.generate_stream("hold", max_new_tokens=60000, ignore_eos=True)]
                next(streams[0])
                streams += [c.generate_stream("hold", max_new_tokens=60000, ignore_eos=True)
                            for _ in range(2)]
                wait_until(lambda: metric(server, "blossom_num_requests_waiting") == 2,
                           what="two waiting requests")
                started = time.monotonic()
                with self.assertRaises(blossom_errors.ResourceExhaustedError) as cm:
                    c.generate("more", max_new_tokens=4)
                self.assertLess(time.monotonic() - started, 2.0)
                self.assertIn("max_waiting_requests", str(cm.exception))
                for s in streams:
                    s.cancel()
            wait_idle(server)
        finally:
            gateway.stop()
            server.stop()


# The tiny model writes 900 tokens in about 0.1 s on a fast CPU, so a stream that must still be
# in flight when a signal lands asks for 6000 (a few seconds: attention grows with the length).
LONG_STREAM_TOKENS = 6000


class DrainTest(unittest.TestCase):
    def test_gateway_sigterm_finishes_streams_and_refuses_new_work(self):
        server = start_server("server-gateway-drain", "--max_total_tokens", "8192")
        self.addCleanup(server.stop)
        gateway = start_gateway("gateway-drain", server, "--drain_timeout", "60")
        body = json.dumps({"inputs": "drain", "parameters": {
            "max_new_tokens": LONG_STREAM_TOKENS, "do_sample": False,
            "ignore_eos": True}}).encode()
        req = urllib.request.Request(gateway.url + "/generate_stream", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(req, timeout=60) as stream:
            events.append(stream.readline())  # the first event: the stream is in flight
            gateway.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: http_status(gateway.url + "/health") == 503, timeout=10,
                       interval=0.005, what="gateway /health 503 while draining")
            late = urllib.request.Request(gateway.url + "/generate", data=body, method="POST",
                                          headers={"Content-Type": "application/json"})
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(late, timeout=10)
            self.assertEqual(refused.exception.code, 503)
            events += stream.read().split(b"\n\n")
        # TGI's last event carries generated_text; index counts from 0.
        last_index = b'"index":%d' % (LONG_STREAM_TOKENS - 1)
        final = [e for e in events if last_index in e and b'"generated_text":null' not in e]
        self.assertTrue(final, events[-3:])  # the in-flight stream ran to its end
        self.assertEqual(gateway.proc.wait(timeout=30), 0)

    def test_sigterm_while_loading_exits_at_once(self):
        # A load that cannot finish: config.json is a FIFO no one writes, so the loader blocks
        # opening it (as a load stalled on storage or a collective would). SIGTERM must end the
        # process promptly instead of waiting out Kubernetes' grace period for a SIGKILL.
        model = tempfile.mkdtemp(prefix="blossom-stalled-")
        self.addCleanup(shutil.rmtree, model, True)
        os.mkfifo(os.path.join(model, "config.json"))
        server = Process("server-stalled-load", [SERVER, "--model", model, "--port", "0",
                                                  "--metrics_port", "-1"],
                         r"grpc_port=(\d+)")
        self.addCleanup(server.kill)
        time.sleep(0.2)  # into the load
        self.assertIsNone(server.proc.poll())
        server.proc.send_signal(signal.SIGTERM)
        self.assertEqual(server.proc.wait(timeout=10), 0)
        self.assertIn("while loading: exiting", server.tail())

    def test_flags_that_could_never_serve_are_refused_before_loading(self):
        for flags, message in ((["--max_waiting_requests", "0"], "--max_waiting_requests must be >= 1"),
                               (["--max_batch_size", "0"], "--max_batch_size must be >= 1"),
                               (["--max_total_tokens", "1"], "--max_total_tokens must be 0"),
                               (["--max_input_tokens", "2048", "--max_total_tokens", "2048"],
                                "must be less than --max_total_tokens"),
                               (["--max_input_tokens", "-1"], "--max_input_tokens must be >= 1"),
                               (["--max_total_tokens", "-1"], "--max_total_tokens must be 0"),
                               # gRPC would bind these modulo 65,536: a port nobody asked for.
                               (["--port", "70000"], "--port must be in [0, 65535]"),
                               (["--port", "-1"], "--port must be in [0, 65535]"),
                               (["--max_message_bytes", "0"], "--max_message_bytes must be >= 1024"),
                               (["--drain_timeout", "-1"], "--drain_timeout must be a finite number"),
                               (["--lora_adapter", "/nonexistent"],
                                "--lora_adapter /nonexistent: not a directory")):
            started = time.monotonic()
            out = subprocess.run([SERVER, "--model", MODEL_DIR, "--port", "0",
                                  "--metrics_port", "-1", *flags],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 1, flags)
            self.assertIn(message, out.stderr + out.stdout, flags)
            self.assertNotIn("listening", out.stdout, flags)  # refused before the port opened
            self.assertLess(time.monotonic() - started, 30, flags)

    def test_a_max_input_tokens_past_the_cap_is_lowered_with_a_warning(self):
        """Without --max_total_tokens (2048 by default), --max_input_tokens 5000 serves 2047 and
        says so: the clamp before loading had made the warning unreachable."""
        server = Process("server-input-cap", [SERVER, "--model", MODEL_DIR, "--host", "127.0.0.1",
                                              "--port", "0", "--metrics_port", "0", "--threads", "1",
                                              "--max_input_tokens", "5000"],
                         r"grpc_port=(\d+) metrics_port=(-?\d+)")
        self.addCleanup(server.kill)
        with blossom_client.BlossomClient(f"127.0.0.1:{server.match.group(1)}", timeout=10) as c:
            wait_until(lambda: c.health() == "SERVING", what="server-input-cap health SERVING")
            self.assertEqual(c.model_info().limits.max_input_tokens, 2047)
        self.assertIn("--max_input_tokens 5000 is lowered to 2047", server.tail())

    def test_lora_adapter_serves_pefts_tokens(self):
        """--lora_adapter on the server and the CLI: the adapter PEFT saved for the model, merged
        at load, gives PEFT's greedy tokens (tests/fixtures/fixture_lora.py) through gRPC, and
        the CLI's local run the same text."""
        adapter = runfile("tests/fixtures/models/bloom-tiny-h4-lora")
        with open(runfile("tests/fixtures/goldens/bloom-tiny-h4-lora/lora.json")) as f:
            golden = json.load(f)["greedy"]
        server = start_server("server-lora", "--lora_adapter", adapter)
        try:
            with blossom_client.BlossomClient(server.grpc, timeout=60) as c:
                for case in golden:
                    done = c.generate(case["input_ids"], max_new_tokens=len(case["new_ids"]),
                                      temperature=0, ignore_eos=True)
                    self.assertEqual([t.id for t in done.tokens], case["new_ids"], case["text"])
                text = c.generate(golden[1]["text"], max_new_tokens=16, temperature=0,
                                  ignore_eos=True).text
        finally:
            server.stop()
        local = subprocess.run([CLI, "generate", "--model", MODEL_DIR, "--lora-adapter", adapter,
                                "--prompt", golden[1]["text"], "--max-new-tokens", "16",
                                "--ignore-eos"], capture_output=True, text=True, timeout=120)
        self.assertEqual(local.returncode, 0, local.stderr)
        self.assertEqual(local.stdout, golden[1]["text"] + text + "\n")
        self.assertIn("+ LoRA " + adapter, local.stderr)

    def test_a_port_in_use_is_refused(self):
        """gRPC's default SO_REUSEPORT let a second server bind a taken port, and the kernel then
        split connections between the two; it must fail like any server whose port is taken."""
        server = start_server("server-port-owner")
        try:
            port = server.grpc.rsplit(":", 1)[1]
            out = subprocess.run([SERVER, "--model", MODEL_DIR, "--host", "127.0.0.1",
                                  "--port", port, "--metrics_port", "-1"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
            self.assertIn(f"cannot listen on 127.0.0.1:{port}", out.stdout + out.stderr)
            self.assertNotIn("gRPC listening", out.stdout + out.stderr)
        finally:
            server.stop()

    def test_max_input_tokens_defaults_to_the_total_cap_less_one(self):
        """As TGI 3 (and vLLM, which has no other cap): a prompt may use the whole context but
        one new token, so /v1/models' max_model_len is a prompt length clients can send."""
        server = start_server("server-input-default", "--max_input_tokens", "0",
                              "--max_total_tokens", "300")
        try:
            with blossom_client.BlossomClient(server.grpc, timeout=60) as c:
                self.assertEqual(c.model_info().limits.max_input_tokens, 299)
                self.assertEqual(c.model_info().limits.max_total_tokens, 300)
                ids = [c.tokenize("word").ids[0]] * 299
                done = c.generate(ids, max_new_tokens=1, temperature=0)
                self.assertEqual(done.usage.prompt_tokens, 299)
                with self.assertRaises(blossom_errors.BlossomError) as cm:
                    c.generate(ids + ids[:1], max_new_tokens=1)
                self.assertIn("max_input_tokens is 299", str(cm.exception))
        finally:
            server.stop()

    def test_gateway_health_follows_server_drain(self):
        # Issue 14: after SIGTERM to the server the gateway's /health stayed 200 while every
        # completion got 503. The gateway watches the server's health: 503 while it drains.
        server = start_server("server-drain-watch", "--drain_timeout", "60",
                              "--max_total_tokens", "8192")
        self.addCleanup(server.stop)
        gateway = start_gateway("gateway-drain-watch", server)
        self.addCleanup(gateway.stop)
        wait_until(lambda: http_status(gateway.url + "/health") == 200, timeout=30,
                   what="gateway /health 200")
        first = threading.Event()
        done = []

        def consume():  # keeps the drain going while /health is asked
            with blossom_client.BlossomClient(server.grpc, timeout=120) as c:
                for chunk in c.generate_stream("watch", max_new_tokens=LONG_STREAM_TOKENS, temperature=0.0,
                                               ignore_eos=True):
                    first.set()
                    done.append(chunk.final is not None)

        consumer = threading.Thread(target=consume)
        consumer.start()
        self.assertTrue(first.wait(60))
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: http_status(gateway.url + "/health") == 503, timeout=10,
                   interval=0.005, what="gateway /health 503 while the server drains")
        self.assertIsNone(server.proc.poll(), "the server should still be draining")
        # Draining, the listener is closed (gRPC's shutdown began: connections got a GOAWAY),
        # so clients reconnect elsewhere instead of meeting SHUTTING_DOWN here.
        host, port = server.grpc.rsplit(":", 1)
        wait_until(lambda: not port_open(host, int(port)), timeout=10, interval=0.01,
                   what="the server's gRPC listener closed while draining")
        self.assertIsNone(server.proc.poll(), "the server should still be draining")
        consumer.join(120)
        self.assertTrue(done and done[-1], "the stream in flight should finish")
        # The gateway's health watch never ends by itself: the server cancels it once the
        # generations are done instead of waiting out its 60 s drain timeout.
        drained = time.monotonic()
        self.assertEqual(server.proc.wait(60), 0, server.tail())
        self.assertLess(time.monotonic() - drained, 15, "the exit waited for the health watch")

    def test_sigterm_loses_no_stream(self):
        server = start_server("server-drain", "--drain_timeout", "60")
        wants = [300 + 10 * i for i in range(20)]
        results = [None] * len(wants)
        started = threading.Barrier(len(wants) + 1)

        def consume(i):
            with blossom_client.BlossomClient(server.grpc, timeout=120) as c:
                stream = c.generate_stream(f"drain {i}", max_new_tokens=wants[i],
                                           temperature=0.0, ignore_eos=True)
                n = 0
                first = True
                final = None
                for chunk in stream:
                    if first:
                        first = False
                        started.wait()
                    n += chunk.token is not None
                    final = chunk.final or final
                results[i] = (n, final.usage.generated_tokens if final else None)

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(wants))]
        for t in threads:
            t.start()
        started.wait(timeout=60)
        server.proc.send_signal(signal.SIGTERM)

        def not_serving():
            try:
                with blossom_client.BlossomClient(server.grpc, timeout=2) as c:
                    return c.health() != "SERVING"
            except blossom_errors.BlossomError:
                return True  # already gone
        wait_until(not_serving, timeout=10, interval=0.005, what="health NOT_SERVING")
        # New work is refused (UNAVAILABLE while draining, or after exit) while the old finishes.
        refused = None
        try:
            with blossom_client.BlossomClient(server.grpc, timeout=5) as c:
                c.generate("late", max_new_tokens=2)
        except blossom_errors.BlossomError as e:
            refused = e
        for t in threads:
            t.join(120)
        self.assertEqual(server.proc.wait(60), 0, server.tail())
        for i, want in enumerate(wants):
            self.assertEqual(results[i], (want, want), f"stream {i}")
        self.assertIsInstance(refused, blossom_errors.UnavailableError)



if __name__ == "__main__":
    unittest.main()
