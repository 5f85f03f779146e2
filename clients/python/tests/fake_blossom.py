"""An in-process fake Blossom server for the client tests: FakeBlossom implements the generated
Blossom servicer (prompts starting with "!" select behaviours: errors, slow streams, details) and
records what it received; ServerFixture serves it with grpc.health.v1 on a free localhost port.
"""
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from blossom_client._proto.blossom.v1 import blossom_pb2_grpc as pb_grpc

WORDS = ["Hello", ",", " wor", "ld", "!"]


def _final(n_generated, reason=pb.FINISH_REASON_LENGTH, seed=42):
    return pb.FinalInfo(
        finish_reason=reason, matched_stop="", seed=seed, request_id="req-1",
        system_fingerprint="blossom-test-float32", max_new_tokens=5,
        usage=pb.Usage(prompt_tokens=3, generated_tokens=n_generated),
        timings=pb.Timings(queue_seconds=0.01, time_to_first_token_seconds=0.02,
                           total_seconds=0.5, time_per_output_token_seconds=0.0125,
                           preemptions=0))


class FakeBlossom(pb_grpc.BlossomServicer):
    def __init__(self):
        self.requests = []
        self.metadata = []
        self.stream_cancelled = threading.Event()
        self.stream_started = threading.Event()

    def _record(self, request, context):
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))

    def _maybe_fail(self, request, context):
        text = request.text
        if text.startswith("!error "):
            _, code, message = text.split(" ", 2)
            context.abort(getattr(grpc.StatusCode, code), message)
        if text == "!details":
            # As the server sends a refusal: google.rpc.Status with BadRequest, ErrorInfo and
            # RetryInfo in the grpc-status-details-bin trailer.
            from google.protobuf import any_pb2, duration_pb2
            from google.rpc import error_details_pb2, status_pb2
            status = status_pb2.Status(code=8, message="queue full")
            for detail in (
                    error_details_pb2.BadRequest(field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field="sampling.top_p")]),
                    error_details_pb2.ErrorInfo(reason="QUEUE_FULL", domain="blossom.v1"),
                    error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1,
                                                                                  nanos=500000000))):
                packed = any_pb2.Any()
                packed.Pack(detail)
                status.details.append(packed)
            context.set_trailing_metadata((("grpc-status-details-bin",
                                            status.SerializeToString()),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full")
        if text == "!sleep":
            time.sleep(2)

    def Generate(self, request, context):
        self._record(request, context)
        self._maybe_fail(request, context)
        tokens = [pb.Token(id=i + 10, text=w, logprob=-0.5 * i) for i, w in enumerate(WORDS)]
        tokens[0].ClearField("logprob")  # absent vs 0 must survive the conversion
        tokens[1].top_logprobs.add(token_id=7, token="x", logprob=-1.25, token_bytes=b"\xc3")
        tokens[2].token_bytes = b"\xa9"  # the second byte of a character: text is lossy
        final = _final(len(tokens), pb.FINISH_REASON_EOS_TOKEN)
        final.prompt_token_ids.extend([1, 2, 3])
        response = pb.GenerateResponse(text="".join(WORDS), tokens=tokens, final=final)
        if request.sampling.HasField("prompt_logprobs"):
            response.prompt_logprobs.add(id=1, text="a")
            scored = response.prompt_logprobs.add(id=2, text="b", logprob=-2.0, rank=3)
            scored.top_logprobs.add(token_id=9, token="z", logprob=-0.25, special=True)
        return response

    def BeamSearch(self, request, context):
        self._record(request, context)
        self._maybe_fail(request, context)
        response = pb.BeamSearchResponse(
            request_id="req-9", steps=3, total_seconds=0.25, system_fingerprint="fp",
            usage=pb.Usage(prompt_tokens=2, generated_tokens=5, cached_prompt_tokens=16))
        response.beams.add(text="ab", score=-0.5, cumulative_logprob=-1.0,
                           finish_reason=pb.FINISH_REASON_EOS_TOKEN,
                           tokens=[pb.Token(id=5, text="a", logprob=-0.25),
                                   pb.Token(id=2, text="</s>", logprob=-0.75, special=True)])
        response.beams.add(text="abc", score=-0.9, cumulative_logprob=-2.7,
                           finish_reason=pb.FINISH_REASON_LENGTH,
                           tokens=[pb.Token(id=5, text="a"), pb.Token(id=6, text="b"),
                                   pb.Token(id=7, text="c")])
        return response

    def GenerateStream(self, request, context):
        self._record(request, context)
        self._maybe_fail(request, context)
        if request.text == "!slow":
            # Streams for up to 10 s unless the client goes away. grpc notices a cancellation
            # either in is_active() or while sending (then it just stops consuming this
            # generator), so the termination callback is what reliably observes it.
            finished = threading.Event()
            context.add_callback(
                lambda: finished.is_set() or self.stream_cancelled.set())
            self.stream_started.set()
            for i in range(1000):
                if not context.is_active():
                    break
                yield pb.GenerateStreamResponse(text_delta=".", token=pb.Token(id=i, text="."))
                time.sleep(0.01)
            else:
                finished.set()
            return
        if request.text == "!error-midstream":
            yield pb.GenerateStreamResponse(text_delta="a", token=pb.Token(id=1, text="a"))
            context.abort(grpc.StatusCode.UNAVAILABLE, "server draining")
        for i, w in enumerate(WORDS):
            yield pb.GenerateStreamResponse(text_delta=w, token=pb.Token(id=i + 10, text=w))
        # A final message without a token (e.g. a stop string held back, then matched).
        yield pb.GenerateStreamResponse(text_delta="", final=_final(
            len(WORDS), pb.FINISH_REASON_STOP_STRING))

    def Tokenize(self, request, context):
        self._record(request, context)
        if request.text == "!large":  # an answer over gRPC's default 4 MiB receive limit
            n = 1 << 20
            return pb.TokenizeResponse(ids=range(n), tokens=["abcd"] * n)
        ids = [ord(c) for c in request.text]
        if request.add_special_tokens:
            ids = [1] + ids
        return pb.TokenizeResponse(
            ids=ids, tokens=list(request.text),
            offsets=[pb.Span(start=i, end=i + 1) for i in range(len(request.text))],
            max_total_tokens=2048)

    def Detokenize(self, request, context):
        self._record(request, context)
        if any(i < 0 or i > 0x10FFFF for i in request.ids):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ids[0] is outside the vocabulary")
        text = "".join(chr(i) for i in request.ids)
        return pb.DetokenizeResponse(text=text.replace("\0", "") if request.skip_special_tokens
                                     else text)

    def GetModelInfo(self, request, context):
        self._record(request, context)
        return pb.ModelInfo(
            model_id="bloom-demo", model_dir="/models/bloom-demo", dtype="float32",
            backend="cpu", tensor_parallel_size=1, vocab_size=2000, hidden_size=128,
            num_layers=2, num_heads=4, eos_token_id=2,  # bos_token_id left absent
            limits=pb.ModelLimits(max_input_tokens=1024, max_total_tokens=2048,
                                  max_new_tokens=1024, max_batch_size=32, max_batched_tokens=4096,
                                  max_waiting_requests=128, max_stop_strings=4, max_logprobs=20),
            kv_block_size=16, kv_blocks_total=512, version="0.1.0")


class ServerFixture:
    """A fake Blossom + health server on a free localhost port."""

    def __init__(self):
        self.servicer = FakeBlossom()
        self.health = health.HealthServicer()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set("blossom.v1.Blossom", health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_BlossomServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self):
        self.server.stop(grace=None).wait()
