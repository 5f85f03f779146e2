"""blossom_client against an in-process fake Blossom server (fake_blossom.py; plain unittest,
no pytest).

Run after `pip install ./clients/python`:  python -m unittest discover -s clients/python/tests
"""
import asyncio
import dataclasses
import json
import unittest

import grpc

import blossom_client
from blossom_client import (AsyncBlossomClient, BlossomClient, BlossomError,
                            DeadlineExceededError, InvalidArgumentError, NotFoundError,
                            ResourceExhaustedError, UnavailableError)
from blossom_client import _convert
from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from fake_blossom import ServerFixture

class SyncClientTest(unittest.TestCase):
    def setUp(self):
        self.fixture = ServerFixture()
        self.fake = self.fixture.servicer
        self.client = BlossomClient(self.fixture.target, api_key="sekret", timeout=10)

    def tearDown(self):
        self.client.close()
        self.fixture.stop()

    def test_generate(self):
        r = self.client.generate("Hi", max_new_tokens=5)
        self.assertEqual(r.text, "Hello, world!")
        self.assertEqual([t.id for t in r.tokens], [10, 11, 12, 13, 14])
        self.assertIsNone(r.tokens[0].logprob)
        self.assertEqual(r.tokens[1].logprob, -0.5)
        self.assertEqual(r.tokens[1].top_logprobs,
                         [blossom_client.TopLogprob(token_id=7, token="x", logprob=-1.25,
                                                    token_bytes=b"\xc3")])
        self.assertEqual(r.tokens[2].token_bytes, b"\xa9")
        self.assertEqual(r.finish_reason, "eos_token")
        self.assertEqual(r.usage, blossom_client.Usage(prompt_tokens=3, generated_tokens=5))
        self.assertEqual(r.timings.time_per_output_token_seconds, 0.0125)
        self.assertEqual(r.final.system_fingerprint, "blossom-test-float32")
        self.assertEqual(r.final.max_new_tokens, 5)
        self.assertAlmostEqual(r.timings.time_to_first_token_seconds, 0.02)
        self.assertEqual(r.seed, 42)
        self.assertEqual(r.request_id, "req-1")
        self.assertEqual(r.prompt_token_ids, [1, 2, 3])
        self.assertEqual(self.fake.requests[-1].text, "Hi")
        self.assertEqual(self.fake.metadata[-1]["authorization"], "Bearer sekret")

    def test_results_carry_every_field_of_their_messages(self):
        """fill() copies the fields a dataclass declares and drops the others silently: a proto
        field added without its dataclass field would never reach a caller."""
        pairs = [(pb.FinalInfo, blossom_client.FinalInfo), (pb.Usage, blossom_client.Usage),
                 (pb.Timings, blossom_client.Timings), (pb.ModelInfo, blossom_client.ModelInfo),
                 (pb.ModelLimits, blossom_client.ModelLimits)]
        for message, cls in pairs:
            declared = {f.name for f in dataclasses.fields(cls)}
            missing = set(message.DESCRIPTOR.fields_by_name) - declared
            self.assertEqual(missing, set(), f"{message.DESCRIPTOR.name} -> {cls.__name__}")

    def test_beam_search(self):
        r = self.client.beam_search([5, 6], 4, num_return_sequences=2, length_penalty=0.5,
                                    early_stopping="never", logprobs=True, max_new_tokens=9,
                                    stop_token_ids=[7], skip_special_tokens=False, priority=1)
        sent = self.fake.requests[-1]
        self.assertEqual(list(sent.token_ids.ids), [5, 6])
        self.assertEqual(sent.beam_width, 4)
        self.assertEqual(sent.num_return_sequences, 2)
        self.assertEqual(sent.length_penalty, 0.5)
        self.assertEqual(sent.early_stopping, pb.EARLY_STOPPING_NEVER)
        self.assertTrue(sent.logprobs)
        self.assertEqual(sent.stopping.max_new_tokens, 9)
        self.assertEqual(list(sent.stopping.stop_token_ids), [7])
        self.assertFalse(sent.stopping.skip_special_tokens)
        self.assertEqual(sent.priority, 1)
        self.assertEqual([b.text for b in r.beams], ["ab", "abc"])
        self.assertEqual(r.beams[0].finish_reason, "eos_token")
        self.assertEqual(r.beams[1].finish_reason, "length")
        self.assertEqual([t.id for t in r.beams[0].tokens], [5, 2])
        self.assertEqual(r.beams[0].tokens[1].logprob, -0.75)
        self.assertTrue(r.beams[0].tokens[1].special)
        self.assertIsNone(r.beams[1].tokens[0].logprob)
        self.assertEqual((r.beams[0].score, r.beams[0].cumulative_logprob), (-0.5, -1.0))
        self.assertEqual(r.usage, blossom_client.Usage(prompt_tokens=2, generated_tokens=5,
                                                       cached_prompt_tokens=16))
        self.assertEqual((r.steps, r.request_id, r.system_fingerprint), (3, "req-9", "fp"))
        # Absent keywords stay absent (the server's defaults); early_stopping as HF spells it.
        self.client.beam_search("Hi", 2, early_stopping=True)
        sent = self.fake.requests[-1]
        self.assertEqual(sent.text, "Hi")
        self.assertFalse(sent.HasField("num_return_sequences"))
        self.assertFalse(sent.HasField("length_penalty"))
        self.assertEqual(sent.early_stopping, pb.EARLY_STOPPING_WHEN_FULL)
        with self.assertRaises(TypeError):
            self.client.beam_search("Hi", 2, temperature=0.5)  # not a beam-search keyword
        with self.assertRaises(TypeError):
            self.client.beam_search("Hi", 2, early_stopping="sometimes")
        with self.assertRaises(InvalidArgumentError):
            self.client.beam_search("!error INVALID_ARGUMENT beam_width must be in [1, 10]", 11)

    def test_logit_bias_allowed_tokens_and_bad_words(self):
        self.client.generate("Hi", logit_bias={5: -100, "7": 2.5}, allowed_token_ids=[5, 7, 9],
                             bad_words=["foo", "bar baz"], guided_choice=["yes", "no"])
        s = self.fake.requests[-1].sampling
        self.assertEqual(list(s.guided_choice), ["yes", "no"])
        self.assertEqual(dict(s.logit_bias), {5: -100.0, 7: 2.5})
        self.assertEqual(list(s.allowed_token_ids), [5, 7, 9])
        self.assertEqual(list(s.bad_words), ["foo", "bar baz"])
        with self.assertRaises(TypeError):
            self.client.generate("Hi", bad_words="foo")  # one str would be split into letters
        with self.assertRaises(TypeError):
            self.client.generate("Hi", logit_bias=[1, 2])

    def test_json_schema_as_a_dict_or_its_text(self):
        self.client.generate("Hi", json_schema={"type": "object"}, json_compact=True)
        s = self.fake.requests[-1].sampling
        self.assertEqual(json.loads(s.json_schema), {"type": "object"})
        self.assertTrue(s.json_compact)
        self.client.generate("Hi", json_schema='{"type": "array"}')
        self.assertEqual(self.fake.requests[-1].sampling.json_schema, '{"type": "array"}')
        self.assertFalse(self.fake.requests[-1].sampling.json_compact)
        self.client.generate("Hi", regex="[0-9]+")
        self.assertEqual(self.fake.requests[-1].sampling.regex, "[0-9]+")
        self.client.generate("Hi", grammar='root ::= "a"+')
        self.assertEqual(self.fake.requests[-1].sampling.grammar, 'root ::= "a"+')

    def test_detokenize(self):
        self.assertEqual(self.client.detokenize([72, 105]), "Hi")
        self.assertEqual(self.fake.requests[-1].ids, [72, 105])
        self.assertFalse(self.fake.requests[-1].skip_special_tokens)
        # Checked before sending, naming the parameter (protobuf's own errors name neither).
        sent = len(self.fake.requests)
        with self.assertRaisesRegex(ValueError, r"detokenize\(\) ids must fit in 32 bits"):
            self.client.detokenize([2**40])
        for bad in ("Hi", [1.5], [True], 7):
            with self.assertRaisesRegex(TypeError, r"detokenize\(\) ids"):
                self.client.detokenize(bad)
        with self.assertRaisesRegex(TypeError, "skip_special_tokens must be a bool"):
            self.client.detokenize([1], skip_special_tokens="yes")
        self.assertEqual(len(self.fake.requests), sent)
        self.assertEqual(self.client.detokenize(iter([72, 105])), "Hi")
        try:
            import numpy
        except ImportError:
            return
        self.assertEqual(self.client.detokenize(numpy.array([72, 105])), "Hi")  # numpy's ints
        self.assertEqual(self.client.detokenize([72, 0, 105], skip_special_tokens=True), "Hi")
        with self.assertRaises(InvalidArgumentError):
            self.client.detokenize([-1])

    def test_prompt_logprobs(self):
        r = self.client.generate("Hi", prompt_logprobs=1)
        self.assertEqual(self.fake.requests[-1].sampling.prompt_logprobs, 1)
        self.assertEqual(r.prompt_logprobs[0], blossom_client.Token(id=1, text="a"))
        self.assertEqual(r.prompt_logprobs[1], blossom_client.Token(
            id=2, text="b", logprob=-2.0, rank=3,
            top_logprobs=[blossom_client.TopLogprob(token_id=9, token="z", logprob=-0.25,
                                                    special=True)]))
        self.assertIsNone(r.tokens[1].rank)  # generated tokens carry no rank
        self.assertEqual(self.client.generate("Hi").prompt_logprobs, [])

    def test_token_id_prompt(self):
        self.client.generate([5, 6, 7])
        req = self.fake.requests[-1]
        self.assertEqual(req.WhichOneof("prompt"), "token_ids")
        self.assertEqual(list(req.token_ids.ids), [5, 6, 7])
        self.client.generate([])  # still the token_ids arm: the server decides it is invalid
        self.assertEqual(self.fake.requests[-1].WhichOneof("prompt"), "token_ids")

    def test_parameters_absent_by_default(self):
        self.client.generate("x")
        req = self.fake.requests[-1]
        for name in ("temperature", "top_k", "top_p", "typical_p", "min_p", "repetition_penalty",
                     "frequency_penalty", "presence_penalty", "seed", "logprobs"):
            self.assertFalse(req.sampling.HasField(name), name)
        self.assertFalse(req.stopping.HasField("max_new_tokens"))
        self.assertFalse(req.stopping.HasField("min_new_tokens"))
        # None means "absent" too.
        self.client.generate("x", temperature=None, seed=None)
        self.assertFalse(self.fake.requests[-1].sampling.HasField("temperature"))

    def test_zero_is_sent_explicitly(self):
        self.client.generate("x", temperature=0, top_k=0, seed=0, logprobs=0, min_p=0.0,
                             min_new_tokens=0)
        req = self.fake.requests[-1]
        for name in ("temperature", "top_k", "seed", "logprobs", "min_p"):
            self.assertTrue(req.sampling.HasField(name), name)
            self.assertEqual(getattr(req.sampling, name), 0)
        self.assertTrue(req.stopping.HasField("min_new_tokens"))

    def test_every_parameter_maps_to_its_field(self):
        self.client.generate(
            "x", max_new_tokens=7, min_new_tokens=2, temperature=0.5, top_k=40, top_p=0.9,
            typical_p=0.75, min_p=0.05, repetition_penalty=1.25, frequency_penalty=-0.5,
            presence_penalty=1.5, seed=2**63 + 1, logprobs=3, stop=["\n\n", "###"],
            stop_token_ids=[2, 3], ignore_eos=True, include_stop_in_output=True, priority=-2,
            model="bloom-demo", request_id="abc", return_prompt_tokens=True,
            truncate_prompt_tokens=5)
        req = self.fake.requests[-1]
        s, st = req.sampling, req.stopping
        self.assertEqual((s.temperature, s.top_k, s.top_p, s.typical_p),
                         (0.5, 40, f32(0.9), 0.75))
        self.assertEqual((s.min_p, s.repetition_penalty, s.frequency_penalty, s.presence_penalty),
                         (f32(0.05), 1.25, -0.5, 1.5))
        self.assertEqual((s.seed, s.logprobs), (2**63 + 1, 3))
        self.assertEqual((st.max_new_tokens, st.min_new_tokens), (7, 2))
        self.assertEqual(list(st.stop), ["\n\n", "###"])
        self.assertEqual(list(st.stop_token_ids), [2, 3])
        self.assertTrue(st.ignore_eos and st.include_stop_in_output)
        self.assertEqual((req.priority, req.model, req.request_id), (-2, "bloom-demo", "abc"))
        self.assertTrue(req.return_prompt_tokens)
        self.assertEqual(req.truncate_prompt_tokens, 5)

    def test_single_stop_string(self):
        self.client.generate("x", stop="###")
        self.assertEqual(list(self.fake.requests[-1].stopping.stop), ["###"])

    def test_unknown_keyword_and_bad_types_raise_type_error(self):
        n = len(self.fake.requests)
        with self.assertRaisesRegex(TypeError, "max_tokens"):
            self.client.generate("x", max_tokens=5)
        with self.assertRaises(TypeError):
            self.client.generate_stream("x", temprature=0.5)  # raised at once, not lazily
        with self.assertRaises(TypeError):
            self.client.generate("x", top_k="forty")
        with self.assertRaises(TypeError):
            self.client.generate(b"bytes")
        with self.assertRaises(TypeError):
            self.client.generate([1, "2"])
        # Values protobuf would coerce (changing the request) are refused, naming the parameter.
        for kwargs in ({"temperature": True}, {"ignore_eos": 5}, {"logit_bias": {1.9: 5}},
                       {"logit_bias": {True: 5}}, {"logit_bias": {3: "x"}}, {"seed": -1}):
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(TypeError, list(kwargs)[0]):
                    self.client.generate("x", **kwargs)
        with self.assertRaisesRegex(TypeError, "logprobs"):
            self.client.beam_search("x", 2, logprobs=0)  # a bool here, unlike generate's
        with self.assertRaisesRegex(TypeError, "beam_width"):
            self.client.beam_search("x", "4")
        with self.assertRaisesRegex(ValueError, "32 bits"):
            self.client.generate([2**31])
        with self.assertRaisesRegex(ValueError, "Unicode"):
            self.client.generate("\ud800")
        with self.assertRaisesRegex(ValueError, "timeout"):
            self.client.generate("x", timeout=float("nan"))
        self.assertEqual(len(self.fake.requests), n)  # nothing was sent
        # Stopping fields the proto has, and a string bias key (JSON's spelling) as the id.
        self.client.generate("x", skip_special_tokens=False, max_new_tokens_to_limit=True,
                             stop_at_text_end=True, logit_bias={"7": -1.5},
                             timeout=float("inf"))
        sent = self.fake.requests[-1]
        self.assertFalse(sent.stopping.skip_special_tokens)
        self.assertTrue(sent.stopping.HasField("skip_special_tokens"))
        self.assertTrue(sent.stopping.max_new_tokens_to_limit)
        self.assertTrue(sent.stopping.stop_at_text_end)
        self.assertEqual(dict(sent.sampling.logit_bias), {7: -1.5})

    def test_stream(self):
        chunks = list(self.client.generate_stream("Hi", max_new_tokens=5))
        # GenerateStream takes its own request message (API lint), with GenerateRequest's fields.
        self.assertIsInstance(self.fake.requests[-1], pb.GenerateStreamRequest)
        self.assertEqual(self.fake.requests[-1].stopping.max_new_tokens, 5)
        self.assertEqual("".join(c.text_delta for c in chunks), "Hello, world!")
        self.assertEqual([c.token.id for c in chunks[:-1]], [10, 11, 12, 13, 14])
        self.assertTrue(all(c.final is None for c in chunks[:-1]))
        last = chunks[-1]
        self.assertTrue(last.is_final)
        self.assertIsNone(last.token)
        self.assertEqual(last.final.finish_reason, "stop_string")
        self.assertEqual(last.final.usage.generated_tokens, 5)

    def test_stream_early_break_cancels_server_side(self):
        for i, chunk in enumerate(self.client.generate_stream("!slow")):
            if i == 2:
                break
        self.assertTrue(self.fake.stream_cancelled.wait(5), "server never saw the cancel")

    def test_stream_error_midstream(self):
        stream = self.client.generate_stream("!error-midstream")
        self.assertEqual(next(stream).text_delta, "a")
        with self.assertRaises(UnavailableError) as cm:
            next(stream)
        self.assertEqual(cm.exception.message, "server draining")

    def test_tokenize(self):
        t = self.client.tokenize("ab")
        self.assertEqual(t.ids, [97, 98])
        self.assertEqual(t.tokens, ["a", "b"])
        self.assertEqual(t.offsets, [(0, 1), (1, 2)])
        self.assertEqual(t.max_total_tokens, 2048)
        self.assertEqual(self.client.tokenize("ab", add_special_tokens=True).ids, [1, 97, 98])

    def test_answers_over_four_mebibytes_arrive(self):
        t = self.client.tokenize("!large")
        self.assertEqual(len(t.ids), 1 << 20)

    def test_callers_receive_limit_is_kept(self):
        options = _convert.channel_options([("grpc.max_receive_message_length", 100)])
        self.assertEqual([v for k, v in options if k == "grpc.max_receive_message_length"], [100])
        self.assertIn(("grpc.max_receive_message_length", -1), _convert.channel_options(None))

    def test_model_info(self):
        info = self.client.model_info()
        self.assertEqual(info.model_id, "bloom-demo")
        self.assertEqual(info.eos_token_id, 2)
        self.assertIsNone(info.bos_token_id)  # absent, not 0
        self.assertEqual(info.limits.max_stop_strings, 4)
        self.assertEqual(info.kv_blocks_total, 512)

    def test_health(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("blossom.v1.Blossom"), "NOT_SERVING")
        with self.assertRaises(NotFoundError):
            self.client.health("no.such.Service")

    def test_error_mapping(self):
        cases = {
            "INVALID_ARGUMENT": InvalidArgumentError,
            "RESOURCE_EXHAUSTED": ResourceExhaustedError,
            "UNAVAILABLE": UnavailableError,
            "NOT_FOUND": NotFoundError,
            "DATA_LOSS": BlossomError,  # no dedicated class: the base one
        }
        for code, cls in cases.items():
            with self.subTest(code=code):
                with self.assertRaises(cls) as cm:
                    self.client.generate(f"!error {code} temperature: must be in [0, 100]")
                self.assertIs(type(cm.exception), cls)
                self.assertEqual(cm.exception.code, getattr(grpc.StatusCode, code))
                self.assertEqual(cm.exception.message, "temperature: must be in [0, 100]")
                self.assertIn(code, str(cm.exception))
        with self.assertRaises(ResourceExhaustedError):  # streams raise while iterating
            list(self.client.generate_stream("!error RESOURCE_EXHAUSTED queue full"))

    def test_error_details_reach_the_exception(self):
        with self.assertRaises(ResourceExhaustedError) as cm:
            self.client.generate("!details")
        e = cm.exception
        self.assertEqual((e.field, e.reason, e.domain), ("sampling.top_p", "QUEUE_FULL",
                                                         "blossom.v1"))
        self.assertAlmostEqual(e.retry_delay, 1.5)
        # Without details (a status the server sends bare): all None.
        with self.assertRaises(InvalidArgumentError) as cm:
            self.client.generate("!error INVALID_ARGUMENT bad")
        self.assertIsNone(cm.exception.reason)
        self.assertIsNone(cm.exception.retry_delay)

    def test_deadline(self):
        with self.assertRaises(DeadlineExceededError):
            self.client.generate("!sleep", timeout=0.2)

    def test_cli_generate_streams_to_stdout(self):
        import contextlib
        import io
        from blossom_client import cli
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["--target", self.fixture.target, "--api-key", "k", "generate", "Hi",
                           "--max-new-tokens", "5", "--stop", "###"])
        self.assertEqual(rc, 0)
        self.assertEqual(out.getvalue(), "Hello, world!\n")
        self.assertIn("stop_string", err.getvalue())
        req = self.fake.requests[-1]
        self.assertEqual(req.stopping.max_new_tokens, 5)
        self.assertEqual(list(req.stopping.stop), ["###"])
        self.assertFalse(req.sampling.HasField("temperature"))
        # A value the client refuses before sending: exit 2, no traceback.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = cli.main(["--target", self.fixture.target, "generate", "Hi", "--seed", "-1"])
        self.assertEqual(rc, 2)
        self.assertIn("seed", err.getvalue())
        # health is a probe: 0 only when SERVING.
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(cli.main(["--target", self.fixture.target, "health"]), 0)

    def test_unreachable_server_is_unavailable(self):
        with BlossomClient("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(UnavailableError):
                client.model_info()


def f32(x):
    """The value x takes after a round trip through a proto float (32-bit)."""
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.fixture = ServerFixture()
        self.fake = self.fixture.servicer
        self.client = AsyncBlossomClient(self.fixture.target, timeout=10)

    async def asyncTearDown(self):
        await self.client.close()
        self.fixture.stop()

    async def test_generate_and_unary_calls(self):
        r = await self.client.generate("Hi", temperature=0)
        self.assertEqual(r.text, "Hello, world!")
        self.assertEqual(r.finish_reason, "eos_token")
        self.assertTrue(self.fake.requests[-1].sampling.HasField("temperature"))
        self.assertEqual((await self.client.tokenize("a")).ids, [97])
        self.assertEqual(await self.client.detokenize([97]), "a")
        self.assertEqual((await self.client.model_info()).num_heads, 4)
        self.assertEqual(await self.client.health(), "SERVING")
        beams = await self.client.beam_search("Hi", 2, max_new_tokens=3)
        self.assertEqual(beams.beams[1].text, "abc")
        self.assertEqual(self.fake.requests[-1].beam_width, 2)

    async def test_stream(self):
        chunks = [c async for c in self.client.generate_stream("Hi", max_new_tokens=5)]
        self.assertEqual("".join(c.text_delta for c in chunks), "Hello, world!")
        self.assertEqual(chunks[-1].final.finish_reason, "stop_string")
        self.assertEqual(sum(c.final is not None for c in chunks), 1)

    async def test_early_break_cancels_server_side(self):
        received = 0
        async for _ in self.client.generate_stream("!slow"):
            received += 1
            if received == 3:
                break
        self.assertEqual(received, 3)
        # The server thread notices within one 10 ms tick; wait without blocking the loop.
        cancelled = await asyncio.get_running_loop().run_in_executor(
            None, self.fake.stream_cancelled.wait, 5)
        self.assertTrue(cancelled, "server never saw the cancel")

    async def test_explicit_cancel(self):
        stream = self.client.generate_stream("!slow")
        await stream.__anext__()
        stream.cancel()
        with self.assertRaises(StopAsyncIteration):
            await stream.__anext__()
        cancelled = await asyncio.get_running_loop().run_in_executor(
            None, self.fake.stream_cancelled.wait, 5)
        self.assertTrue(cancelled)

    async def test_errors(self):
        with self.assertRaises(InvalidArgumentError):
            await self.client.generate("!error INVALID_ARGUMENT top_p: must be in (0, 1]")
        with self.assertRaises(UnavailableError):
            async for _ in self.client.generate_stream("!error-midstream"):
                pass
        with self.assertRaises(TypeError):
            self.client.generate_stream("x", bogus=1)
        with self.assertRaises(DeadlineExceededError):
            await self.client.generate("!sleep", timeout=0.2)
        with self.assertRaises(ResourceExhaustedError) as cm:
            await self.client.generate("!details")
        self.assertEqual(cm.exception.reason, "QUEUE_FULL")
        self.assertAlmostEqual(cm.exception.retry_delay, 1.5)


if __name__ == "__main__":
    unittest.main()
