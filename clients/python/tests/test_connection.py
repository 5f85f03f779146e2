"""Deadlines and keepalive: `timeout=0` is no deadline, a negative one is refused, and a stream
whose server is cut off by a network partition fails instead of waiting forever.

The partition is a TCP relay between client and fake server that, once cut, drops every byte
both ways while keeping both connections open (what a dead route looks like: no FIN, no RST).
"""
import asyncio
import contextlib
import io
import math
import socket
import threading
import time
import unittest
from concurrent import futures

import grpc

from blossom_client import (AsyncBlossomClient, BlossomClient, UnavailableError, _convert, cli)
from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from blossom_client._proto.blossom.v1 import blossom_pb2_grpc as pb_grpc
from fake_blossom import FakeBlossom, ServerFixture


class SilentStreamBlossom(FakeBlossom):
    """"!silent" streams one chunk, then nothing (a long queue wait, or a dead route) for up to
    60 s unless the call ends."""

    def GenerateStream(self, request, context):
        if request.text != "!silent":
            yield from super().GenerateStream(request, context)
            return
        yield pb.GenerateStreamResponse(text_delta="a", token=pb.Token(id=1, text="a"))
        for _ in range(1200):
            if not context.is_active():
                return
            time.sleep(0.05)


class Relay:
    """Forwards 127.0.0.1:<port> to `target_port` until cut(); then bytes are read and dropped."""

    def __init__(self, target_port):
        self._target_port = target_port
        self._cut = threading.Event()
        self._sockets = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self):
        self._cut.set()

    def close(self):
        for s in [self._listener] + self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._target_port))
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source, sink):
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    return
                if not self._cut.is_set():
                    sink.sendall(data)
            except OSError:
                return


class KeepaliveTest(unittest.TestCase):
    def test_defaults_respect_the_servers_ping_policy(self):
        options = dict(_convert.channel_options(None))
        # Pings closer together than the server's minimum earn strikes, then GOAWAY.
        self.assertGreaterEqual(options["grpc.keepalive_time_ms"],
                                _convert.SERVER_MIN_PING_INTERVAL_MS)
        self.assertEqual(options["grpc.keepalive_timeout_ms"], _convert.KEEPALIVE_TIMEOUT_MS)
        self.assertEqual(options["grpc.http2.ping_timeout_ms"], _convert.KEEPALIVE_TIMEOUT_MS)
        self.assertEqual(options["grpc.http2.max_pings_without_data"], 0)
        self.assertEqual(options["grpc.max_receive_message_length"], -1)

    def test_callers_options_win(self):
        given = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 500)]
        options = _convert.channel_options(given)
        self.assertEqual(options[:2], given)
        names = [name for name, _ in options]
        self.assertEqual(len(names), len(set(names)), options)  # nothing given twice
        # The ping timeout follows the caller's keepalive timeout unless set itself.
        self.assertEqual(dict(options)["grpc.http2.ping_timeout_ms"], 500)
        options = dict(_convert.channel_options([("grpc.http2.ping_timeout_ms", 7),
                                                 ("grpc.keepalive_time_ms", -1)]))
        self.assertEqual(options["grpc.http2.ping_timeout_ms"], 7)
        self.assertEqual(options["grpc.keepalive_time_ms"], -1)

    def test_partitioned_stream_fails_instead_of_hanging(self):
        # A server that accepts pings this often (blossom-server's policy wants 5 minutes): the
        # test shortens the client's keepalive, the rest are the client's defaults.
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[
            ("grpc.http2.min_ping_interval_without_data_ms", 100),
            ("grpc.http2.max_ping_strikes", 0)])
        pb_grpc.add_BlossomServicer_to_server(SilentStreamBlossom(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        relay = Relay(port)
        self.addCleanup(lambda: server.stop(grace=None).wait())
        self.addCleanup(relay.close)
        options = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 2000)]
        with BlossomClient(f"127.0.0.1:{relay.port}", options=options) as client:
            # The deadline only bounds the test: without keepalive it is what ends the call.
            stream = client.generate_stream("!silent", timeout=30)
            self.assertEqual(next(stream).text_delta, "a")
            # Quiet but alive for several keepalive periods first: gRPC's default cap of 2
            # pings without data would then hold the ping that finds the partition back.
            time.sleep(3.5)
            relay.cut()
            cut = time.monotonic()
            with self.assertRaises(UnavailableError):
                next(stream)
            self.assertLess(time.monotonic() - cut, 15)


class ZeroTimeoutTest(unittest.TestCase):
    def setUp(self):
        self.fixture = ServerFixture()
        self.addCleanup(self.fixture.stop)

    def test_zero_is_no_deadline(self):
        self.assertIsNone(_convert.deadline(0))
        self.assertIsNone(_convert.deadline(0.0))
        self.assertIsNone(_convert.deadline(math.inf))
        self.assertEqual(_convert.deadline(2.5), 2.5)
        # "!sleep" answers after 2 s: a zero deadline would have failed it at once.
        with BlossomClient(self.fixture.target, timeout=0) as client:
            self.assertEqual(client.generate("!sleep").text, "Hello, world!")
        with BlossomClient(self.fixture.target, timeout=0.1) as client:
            self.assertEqual(client.generate("!sleep", timeout=0).text, "Hello, world!")

    def test_negative_or_nan_is_refused(self):
        for bad in (-1, -0.5, float("nan")):
            with self.assertRaisesRegex(ValueError, "0 = no deadline"):
                BlossomClient(self.fixture.target, timeout=bad)
        with BlossomClient(self.fixture.target) as client:
            with self.assertRaisesRegex(ValueError, "timeout must be >= 0"):
                client.generate("x", timeout=-1)
            with self.assertRaises(TypeError):
                client.generate("x", timeout="5")

    def test_cli_timeout_zero_is_no_deadline(self):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["--target", self.fixture.target, "--timeout", "0", "generate",
                           "!sleep"])
        self.assertEqual(rc, 0, err.getvalue())
        self.assertEqual(out.getvalue(), "Hello, world!\n")
        for bad in ("-1", "nan", "soon"):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
                cli.main(["--target", self.fixture.target, "--timeout", bad, "health"])
            self.assertEqual(cm.exception.code, 2)  # argparse's usage error
            self.assertIn("--timeout", err.getvalue())


class AsyncZeroTimeoutTest(unittest.IsolatedAsyncioTestCase):
    async def test_zero_is_no_deadline_and_negative_refused(self):
        fixture = ServerFixture()
        try:
            with self.assertRaises(ValueError):
                AsyncBlossomClient(fixture.target, timeout=-1)
            async with AsyncBlossomClient(fixture.target, timeout=0) as client:
                self.assertEqual((await client.generate("!sleep")).text, "Hello, world!")
                with self.assertRaises(ValueError):
                    await client.generate("x", timeout=-2)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, fixture.stop)


if __name__ == "__main__":
    unittest.main()
