"""End-to-end protocol checks over loopback against the real blossom-server and blossom-gateway:
malformed and hostile HTTP requests, gRPC reflection, health and 1000 concurrent streams, and TLS
(server, gateway and mutual TLS, for the Python client, the gateway and the CLI, with a
throw-away CA).
"""
import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import blossom_client
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from blossom_client import errors as blossom_errors

import e2e_common
from e2e_common import CLI, MODEL, auth, grpc_greedy, http_status, wait_idle
from procs import MODEL_DIR, SERVER, Process, start_gateway, start_server, wait_until


def setUpModule():
    global SRV, GW
    SRV, GW = e2e_common.start_shared()


def tearDownModule():
    e2e_common.stop_shared()


def http_call(method, path, body=None, headers=None, raw=None):
    """(status, parsed JSON or text, headers) without raising on HTTP errors."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(GW.url + path, data=data, method=method)
    hdrs = {"Content-Type": "application/json", **auth()}
    hdrs.update(headers or {})
    for k, v in hdrs.items():
        if v is not None:
            req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text, h = r.status, r.read().decode("utf-8", "replace"), r.headers
    except urllib.error.HTTPError as e:
        status, text, h = e.code, e.read().decode("utf-8", "replace"), e.headers
    try:
        return status, json.loads(text), h
    except ValueError:
        return status, text, h


class MalformedRequestTest(unittest.TestCase):
    """Each bad request gets the right status and a message naming the problem."""

    CASES = [
        # (method, path, body or raw bytes, headers, status, message substring)
        ("POST", "/v1/completions", b"{not json", None, 400, "JSON"),
        ("POST", "/v1/completions", b"", None, 400, ""),
        ("POST", "/v1/completions", b"[1,2,3]", None, 400, "object"),
        ("POST", "/v1/completions", {"model": MODEL}, None, 400, "prompt"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": 5}, None, 400, "prompt"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": ""}, None, 400, "prompt"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": "ten"}, None,
         400, "max_tokens"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -1}, None, 400,
         "max_tokens"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "temperature": -0.5}, None,
         400, "temperature"),
        ("POST", "/v1/completions", b'{"model":"bloom-tiny-h4","prompt":"x","temperature":NaN}',
         None, 400, ""),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "top_p": 0}, None, 400,
         "top_p"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "frequency_penalty": 3}, None,
         400, "frequency_penalty"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "presence_penalty": -9}, None,
         400, "presence_penalty"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "n": 500}, None, 400, "n"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 99}, None, 400,
         "logprobs"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "stop": 7}, None, 400, "stop"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "stop": [""]}, None, 400,
         "stop"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 100000}, None,
         400, "max"),
        ("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"}, None, 404, "gpt-4"),
        # An over-long prompt is a validation error (OpenAI/vLLM 400, TGI 422), not a 413.
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "word " * 400}, None, 400, "long"),
        ("POST", "/generate", {"inputs": "word " * 400}, None, 422, "long"),
        ("POST", "/v1/completions", b'{"model":"bloom-tiny-h4","prompt":"\xff\xfe"}', None, 400,
         "UTF-8"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x"},
         {"Authorization": None}, 401, ""),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x"},
         {"Authorization": "Bearer wrong"}, 401, ""),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x"},
         {"Authorization": "Basic abc"}, 401, ""),
        ("POST", "/v1/chat/completions", {"model": MODEL}, None, 400, "messages"),
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": "hi"}, None, 400,
         "messages"),
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user"}]}, None,
         400, "content"),
        ("POST", "/v1/chat/completions",
         {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, None, 400, "role"),
        ("POST", "/generate", {"parameters": {}}, None, 422, "inputs"),
        ("POST", "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 0}}, None, 422,
         "max_new_tokens"),
        ("POST", "/generate", {"inputs": "x", "parameters": {"top_k": "five"}}, None, 422,
         "top_k"),
        ("POST", "/generate", {"inputs": "x", "parameters": {"repetition_penalty": 0}}, None, 422,
         "repetition_penalty"),
        ("POST", "/generate", {"inputs": "x", "parameters": {"typical_p": 2}}, None, 422,
         "typical_p"),
        ("POST", "/generate", b"\x00\x01garbage", None, 422, ""),
        ("POST", "/v1/completions", b'{"model":"x","prompt":"' + b"a" * (2 << 20) + b'"}', None,
         413, ""),
        ("GET", "/v1/nonexistent", None, None, 404, ""),
        # Issue 14: inputs that can never succeed were answered 429 + Retry-After.
        ("POST", "/v1/completions", {"model": "m" * 8000, "prompt": "x"}, None, 400, "256 bytes"),
        # Longer than the context is tokenized (as TGI and vLLM do); past the reply bound, 422.
        ("POST", "/tokenize", {"inputs": "a " * 70000}, None, 422, "at most 65536"),
        ("POST", "/generate", b'{"inputs":"x"}\x00garbage', None, 422, "NUL"),
        ("POST", "/generate", b'{"inputs":"x","inputs":"y"}', None, 422, "duplicate"),
    ]

    def test_each_malformed_request(self):
        failures = []
        for i, (method, path, body, headers, status, needle) in enumerate(self.CASES):
            raw = body if isinstance(body, bytes) else None
            got, payload, _ = http_call(method, path, None if raw is not None else body,
                                        headers, raw=raw)
            text = json.dumps(payload) if not isinstance(payload, str) else payload
            if got != status or needle.lower() not in text.lower():
                failures.append(f"case {i} {method} {path}: want {status} '{needle}', "
                                f"got {got}: {text[:200]}")
            if got >= 400 and got != 413 and got != 404 and not text.strip():
                failures.append(f"case {i}: empty error body")
        self.assertGreaterEqual(len(self.CASES), 30)
        self.assertEqual(failures, [], "\n".join(failures))
        # The server stays healthy.
        status, _, _ = http_call("GET", "/health")
        self.assertEqual(status, 200)
        self.assertEqual(grpc_greedy("still alive", 3).usage.generated_tokens, 3)


def raw_exchange(url, data, shutdown_write=False, timeout=10):
    """Sends raw bytes to an HTTP server and returns everything it answers until it closes."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        if shutdown_write:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out


def final_status(reply):
    """The status code of the last response head in raw bytes (skipping interim 1xx)."""
    codes = [int(line.split()[1]) for line in reply.split(b"\r\n") if line.startswith(b"HTTP/1.")]
    finals = [c for c in codes if c >= 200]
    return finals[0] if finals else None


class HostileClientTest(unittest.TestCase):
    """Issue 14, against the real gateway binary without --api-keys-file."""

    @classmethod
    def setUpClass(cls):
        cls.gw = start_gateway("gateway-open", SRV)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_unsendable_authorization_is_400_not_a_crash(self):
        for value in (b"Bearer \xc3\xa9", b"Bearer a\tb"):
            reply = raw_exchange(self.gw.url, b"GET /health HTTP/1.1\r\nAuthorization: " + value +
                                 b"\r\nConnection: close\r\n\r\n")
            self.assertEqual(final_status(reply), 400, reply[:300])
        reply = raw_exchange(self.gw.url, b"GET /health HTTP/1.1\r\nAuthorization: Bearer " +
                             b"k" * 9000 + b"\r\nConnection: close\r\n\r\n")
        self.assertEqual(final_status(reply), 431, reply[:300])
        self.assertIn(b"1024 bytes", reply)
        self.assertIsNone(self.gw.proc.poll(), "the gateway died")
        reply = raw_exchange(self.gw.url, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
        self.assertEqual(final_status(reply), 200, reply[:300])

    def test_half_close_absolute_form_and_bare_lf(self):
        reply = raw_exchange(self.gw.url, b"GET /live HTTP/1.1\r\n\r\n", shutdown_write=True)
        self.assertEqual(final_status(reply), 200, reply[:300])
        reply = raw_exchange(self.gw.url, b"GET http://example.com/live HTTP/1.1\r\n"
                             b"Host: example.com\r\nConnection: close\r\n\r\n")
        self.assertEqual(final_status(reply), 200, reply[:300])
        start = time.monotonic()
        reply = raw_exchange(self.gw.url, b"GET /live HTTP/1.1\nHost: x\n\n")
        self.assertEqual(final_status(reply), 400, reply[:300])
        self.assertLess(time.monotonic() - start, 5)

    def test_server_metrics_port_is_loopback_by_default(self):
        # gRPC on every address, but the unauthenticated metrics port stays on loopback.
        server = start_server("server-any-host", "--host", "0.0.0.0")
        try:
            port = int(server.metrics.rsplit(":", 1)[1])
            self.assertEqual(listening_addresses(port), {"0100007F"})  # 127.0.0.1 only
            # A gRPC port others can reach, without keys or TLS, is warned about at start.
            log = log_text(server)
            self.assertIn("reachable from other machines, and has no API keys", log)
            self.assertIn("reachable from other machines, and serves plaintext", log)
        finally:
            server.stop()


def listening_addresses(port):
    """The hex local addresses (as /proc/net/tcp{,6} write them, "0100007F" for 127.0.0.1)
    listening on TCP `port`; an IPv4-mapped IPv6 address (gRPC's socket for 127.0.0.1) as its
    IPv4 address."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, local_port = local.rsplit(":", 1)
            if state == "0A" and int(local_port, 16) == port:  # LISTEN
                addresses.add(address[24:] if address.startswith("0000000000000000FFFF0000")
                              else address)
    return addresses


def log_text(proc):
    with open(proc.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def reflect(target):
    """(service names, whether the Blossom service's descriptor came back) by gRPC reflection."""
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(
                        file_containing_symbol="blossom.v1.Blossom")]
        responses = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    return ([s.name for s in responses[0].list_services_response.service],
            len(responses[1].file_descriptor_response.file_descriptor_proto) > 0)


def bare_server(name, *flags):
    """blossom-server with only `flags` beyond the model and ephemeral ports (no --host, unlike
    start_server), once its gRPC port is open; proc.grpc is its loopback address."""
    proc = Process(name, [SERVER, "--model", MODEL_DIR, "--port", "0", "--metrics_port", "-1",
                          "--threads", "1", *flags], r"grpc_port=(\d+)")
    proc.port = int(proc.match.group(1))
    proc.grpc = f"127.0.0.1:{proc.port}"
    return proc


def keys_file(text):
    path = os.path.join(tempfile.mkdtemp(), "keys.txt")
    with open(path, "w") as f:
        f.write(text)
    return path


class ServerExposureTest(unittest.TestCase):
    """What the gRPC port exposes unless flags say otherwise: this machine only, reflection only
    without API keys, and keys files that could lock every client out refused."""

    def test_grpc_binds_loopback_by_default(self):
        server = bare_server("server-default-host")
        try:
            self.assertEqual(listening_addresses(server.port), {"0100007F"})  # 127.0.0.1 only
            self.assertNotIn("reachable from other machines", log_text(server))
        finally:
            server.stop()

    def test_reflection_is_off_with_api_keys_unless_asked_for(self):
        keys = keys_file("# keys\nshort-key\ne2e-key-0123456789abcdef\n")
        server = bare_server("server-keys-no-reflection", "--api_keys_file", keys)
        try:
            with self.assertRaises(grpc.RpcError) as cm:
                reflect(server.grpc)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            log = log_text(server)
            # The short key is named by its line, never quoted.
            self.assertIn("line(s) 2 are shorter than 16 characters", log)
            self.assertNotIn("short-key", log)
        finally:
            server.stop()
        server = bare_server("server-keys-reflection", "--api_keys_file", keys,
                             "--grpc-reflection=true")
        try:
            services, described = reflect(server.grpc)
            self.assertIn("blossom.v1.Blossom", services)
            self.assertTrue(described)
        finally:
            server.stop()

    def test_unusable_keys_file_stops_the_server(self):
        keys = keys_file("e2e-key-0123456789abcdef\nBearer sk-0123456789abcdef\n")
        run = subprocess.run([SERVER, "--model", MODEL_DIR, "--port", "0", "--metrics_port", "-1",
                              "--api_keys_file", keys], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn(f"{keys} line 2: holds 'Bearer <key>'", run.stdout + run.stderr)
        self.assertNotIn("sk-0123456789abcdef", run.stdout + run.stderr)
        self.assertNotIn("grpc_port=", run.stdout)


class GrpcProtocolTest(unittest.TestCase):
    def test_reflection_describes_the_api(self):
        # The shared server has no API keys: reflection is on by default.
        services, described = reflect(SRV.grpc)
        self.assertIn("blossom.v1.Blossom", services)
        self.assertTrue(described)

    def test_health_watch_streams_status(self):
        with grpc.insecure_channel(SRV.grpc) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "blossom.v1.Blossom"):
                watch = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=10)
                first = next(watch)
                watch.cancel()
                self.assertEqual(first.status, health_pb2.HealthCheckResponse.SERVING)
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_undecodable_request_is_invalid_argument_naming_its_type(self):
        # Bytes a protobuf library would never produce (a wire type that does not exist), and a
        # text field that is not UTF-8: the real binary answers INVALID_ARGUMENT, not gRPC's
        # empty UNIMPLEMENTED, unary and streamed.
        identity = lambda raw: raw
        with grpc.insecure_channel(SRV.grpc) as channel:
            for method, payload in (("Generate", b"\xff\x01\x02"),
                                    ("GenerateStream", b"\x0a\x02\xc3\x28")):
                with self.subTest(method=method):
                    path = "/blossom.v1.Blossom/" + method
                    if method == "Generate":
                        call = channel.unary_unary(path, request_serializer=identity,
                                                   response_deserializer=identity)
                        run = lambda: call(payload, timeout=10)
                    else:
                        call = channel.unary_stream(path, request_serializer=identity,
                                                    response_deserializer=identity)
                        run = lambda: list(call(payload, timeout=10))
                    with self.assertRaises(grpc.RpcError) as cm:
                        run()
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertIn("does not decode as blossom.v1." + method + "Request",
                                  cm.exception.details())
            # Still serving.
            self.assertEqual(grpc_greedy("Hello", 2).final.usage.generated_tokens, 2)

    def test_1000_concurrent_streams(self):
        server = start_server("server-1000", "--max_batch_size", "1024",
                              "--max_batched_tokens", "8192", "--max_waiting_requests", "2048")
        try:
            count = 1000

            async def run():
                all_started = asyncio.Event()
                started = 0

                async def one(client, i):
                    nonlocal started
                    tokens = 0
                    async for chunk in client.generate_stream(f"c{i}", max_new_tokens=12,
                                                              temperature=0.0, ignore_eos=True):
                        tokens += chunk.token is not None
                        if tokens == 1:
                            started += 1
                            if started == count:
                                all_started.set()
                            # Hold this stream open until every stream has its first token:
                            # then all 1000 are open on the server at the same time.
                            await asyncio.wait_for(all_started.wait(), 120)
                    return tokens

                async with blossom_client.AsyncBlossomClient(server.grpc, timeout=180) as c:
                    return await asyncio.gather(*(one(c, i) for i in range(count)))

            results = asyncio.run(run())
            self.assertEqual(results, [12] * count)
            wait_idle(server)
        finally:
            server.stop()


def make_certificates(directory):
    """A throw-away CA, a server certificate for localhost/127.0.0.1 and a client certificate."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", "/CN=blossom-test-ca")
    with open(os.path.join(directory, "san.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", "san.cnf")
    read = lambda n: open(os.path.join(directory, n), "rb").read()
    return {n: read(n) for n in ("ca.pem", "client.key", "client.pem")}


class TlsTest(unittest.TestCase):
    def test_tls_and_mutual_tls(self):
        if shutil.which("openssl") is None:
            self.fail("openssl is missing")
        work = tempfile.mkdtemp()
        certs = make_certificates(work)
        server_flags = ["--tls_cert", os.path.join(work, "server.pem"),
                        "--tls_key", os.path.join(work, "server.key")]
        tls = grpc.ssl_channel_credentials(root_certificates=certs["ca.pem"])
        server = start_server("server-tls", *server_flags, credentials=tls, host="localhost")
        try:
            with blossom_client.BlossomClient(server.grpc, timeout=30, credentials=tls) as c:
                self.assertEqual(c.generate("secure", max_new_tokens=3,
                                            ignore_eos=True).usage.generated_tokens, 3)
            with blossom_client.BlossomClient(server.grpc, timeout=5) as plain:
                with self.assertRaises(blossom_errors.BlossomError):
                    plain.health()
            # The gateway reaches a TLS server with --backend_tls and the CA (issue 14).
            gateway = start_gateway("gateway-tls", server, "--backend_tls", "--backend_ca_file",
                                    os.path.join(work, "ca.pem"))
            try:
                wait_until(lambda: http_status(gateway.url + "/health") == 200,
                           what="gateway-tls /health 200")
                req = urllib.request.Request(gateway.url + "/generate", method="POST",
                                             data=json.dumps({"inputs": "secure", "parameters": {
                                                 "max_new_tokens": 2}}).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    self.assertEqual(r.status, 200)
            finally:
                gateway.stop()
            # HTTPS on the gateway itself (--tls_cert/--tls_key), verified against the CA.
            https_gateway = start_gateway("gateway-https", server, "--backend_tls",
                                          "--backend_ca_file", os.path.join(work, "ca.pem"),
                                          *server_flags)
            try:
                url = "https://localhost:" + https_gateway.url.rsplit(":", 1)[1]
                context = ssl.create_default_context(cafile=os.path.join(work, "ca.pem"))
                wait_until(lambda: http_status(url + "/health", context=context) == 200,
                           what="gateway-https /health 200")
                req = urllib.request.Request(url + "/generate", method="POST",
                                             data=json.dumps({"inputs": "secure", "parameters": {
                                                 "max_new_tokens": 2}}).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30, context=context) as r:
                    self.assertEqual(r.status, 200)
                    self.assertIn("generated_text", json.loads(r.read()))
                # Plain HTTP on the HTTPS port gets no response.
                self.assertIsNone(http_status(https_gateway.url + "/health", timeout=5))
            finally:
                https_gateway.stop()
            plain_gateway = start_gateway("gateway-plain-to-tls", server)
            try:
                self.assertEqual(http_status(plain_gateway.url + "/health"), 503)
            finally:
                plain_gateway.stop()
        finally:
            server.stop()

        mutual = grpc.ssl_channel_credentials(root_certificates=certs["ca.pem"],
                                              private_key=certs["client.key"],
                                              certificate_chain=certs["client.pem"])
        server = start_server("server-mtls", *server_flags, "--tls_client_ca",
                              os.path.join(work, "ca.pem"), credentials=mutual, host="localhost")
        try:
            with blossom_client.BlossomClient(server.grpc, timeout=30, credentials=mutual) as c:
                self.assertEqual(c.health(), "SERVING")
            with blossom_client.BlossomClient(server.grpc, timeout=5, credentials=tls) as no_cert:
                with self.assertRaises(blossom_errors.BlossomError):
                    no_cert.health()
            # The gateway and the CLI present a client certificate (--backend-tls-cert/-key,
            # --tls_cert/--tls_key); without one the server turns them away.
            client_flags = ["--backend_tls", "--backend_ca_file", os.path.join(work, "ca.pem"),
                            "--backend-tls-cert", os.path.join(work, "client.pem"),
                            "--backend-tls-key", os.path.join(work, "client.key")]
            gateway = start_gateway("gateway-mtls", server, *client_flags)
            try:
                wait_until(lambda: http_status(gateway.url + "/health") == 200,
                           what="gateway-mtls /health 200")
                req = urllib.request.Request(gateway.url + "/generate", method="POST",
                                             data=json.dumps({"inputs": "mutual", "parameters": {
                                                 "max_new_tokens": 2}}).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    self.assertEqual(r.status, 200)
            finally:
                gateway.stop()
            no_cert_gateway = start_gateway("gateway-mtls-no-cert", server, *client_flags[:3])
            try:
                self.assertEqual(http_status(no_cert_gateway.url + "/health"), 503)
            finally:
                no_cert_gateway.stop()
            cli = [CLI, "health", "--server", server.grpc, "--tls", "--tls_ca",
                   os.path.join(work, "ca.pem")]
            with_cert = subprocess.run(cli + ["--tls_cert", os.path.join(work, "client.pem"),
                                              "--tls_key", os.path.join(work, "client.key")],
                                       capture_output=True, text=True, timeout=60)
            self.assertEqual(with_cert.returncode, 0, with_cert.stderr)
            self.assertEqual(with_cert.stdout.strip(), "SERVING")
            without = subprocess.run(cli + ["--timeout", "5"], capture_output=True, text=True,
                                     timeout=60)
            self.assertEqual(without.returncode, 1, without.stderr)
        finally:
            server.stop()



if __name__ == "__main__":
    unittest.main()
