"""The synchronous client."""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from blossom_client import _convert, results
from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from blossom_client._proto.blossom.v1 import blossom_pb2_grpc as pb_grpc
from blossom_client.errors import from_rpc_error

_UNSET = object()


class BlossomClient:
    """Client for one Blossom server. Thread-safe (one gRPC channel shared by all calls).

    `target` is "host:port". `api_key` is sent as "authorization: Bearer <key>" on every call.
    `timeout` (seconds) is the default deadline of every call; each method also takes `timeout=`.
    None, 0 or math.inf is no deadline; a negative or NaN is a ValueError.
    Pass `credentials` (grpc.ssl_channel_credentials(...)) for TLS; the default is plaintext.
    `options` are gRPC channel options; Blossom's defaults (no receive limit, keepalive pings so
    that a call whose server vanished fails with UnavailableError instead of waiting forever)
    fill in those not given: see _convert.channel_options.
    Failed calls raise BlossomError subclasses (see blossom_client.errors).
    """

    def __init__(self, target: str, api_key: Optional[str] = None,
                 timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None):
        _convert.deadline(timeout)  # a bad default fails here, not at the first call
        self._timeout = timeout
        self._metadata = _convert.metadata(api_key)
        options = _convert.channel_options(options)
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.BlossomStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _deadline(self, timeout):
        return _convert.deadline(self._timeout if timeout is _UNSET else timeout)

    def _unary(self, rpc, request, timeout):
        """One unary call with this client's deadline and metadata; errors as BlossomError."""
        try:
            return rpc(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def generate(self, prompt: _convert.Prompt, *, timeout=_UNSET,
                 **params) -> results.GenerateResult:
        """Generates a whole completion. `prompt` is text or a list of token ids; keyword
        parameters as in the README (unknown ones raise TypeError)."""
        request = _convert.build_generate_request("generate", prompt, params)
        return _convert.generate_result(self._unary(self._stub.Generate, request, timeout))

    def generate_stream(self, prompt: _convert.Prompt, *, timeout=_UNSET,
                        **params) -> "GenerateStream":
        """Streams the completion: an iterator of StreamChunk, the last with `final` set.
        Parameters are checked here (TypeError at once); RPC errors are raised while iterating.
        Leaving the loop early (or cancel()) cancels the request on the server."""
        request = _convert.build_stream_request(prompt, params)
        call = self._stub.GenerateStream(request, timeout=self._deadline(timeout),
                                         metadata=self._metadata)
        return GenerateStream(call)

    def beam_search(self, prompt: _convert.Prompt, beam_width: int, *, timeout=_UNSET,
                    **params) -> results.BeamSearchResult:
        """Beam search as Hugging Face's generate(num_beams=beam_width, do_sample=False): the
        best num_return_sequences (default: every) beams, best first. Keywords:
        num_return_sequences, length_penalty, early_stopping (False, True or "never"),
        logprobs (each token's), max_new_tokens, min_new_tokens, ignore_eos, stop_token_ids,
        include_stop_in_output, skip_special_tokens, and the request fields of generate()."""
        request = _convert.build_beam_search_request(prompt, beam_width, params)
        return _convert.beam_search_result(self._unary(self._stub.BeamSearch, request, timeout))

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 timeout=_UNSET) -> results.TokenizeResult:
        request = pb.TokenizeRequest(text=text, add_special_tokens=add_special_tokens)
        return _convert.tokenize_result(self._unary(self._stub.Tokenize, request, timeout))

    def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = False, *,
                   timeout=_UNSET) -> str:
        """The text of token ids (special tokens kept unless skip_special_tokens)."""
        request = _convert.build_detokenize_request(ids, skip_special_tokens)
        return self._unary(self._stub.Detokenize, request, timeout).text

    def model_info(self, *, timeout=_UNSET) -> results.ModelInfo:
        return _convert.model_info(
            self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), timeout))

    def health(self, service: str = "", *, timeout=_UNSET) -> str:
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING" (loading or draining), ...
        `service` "" is the whole server, "blossom.v1.Blossom" the API."""
        response = self._unary(self._health.Check,
                               health_pb2.HealthCheckRequest(service=service), timeout)
        return _convert.health_status_name(response.status)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "BlossomClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GenerateStream:
    """An iterator of StreamChunk over one GenerateStream call. Not thread-safe (one consumer).

    The call is cancelled when the stream is closed before its end: cancel(), leaving a `with`
    block, or the object being garbage collected (CPython: as soon as a `for` loop breaks)."""

    def __init__(self, call):
        self._call = call
        self._done = False

    def __iter__(self) -> Iterator[results.StreamChunk]:
        return self

    def __next__(self) -> results.StreamChunk:
        if self._done:
            raise StopIteration
        try:
            response = next(self._call)
        except StopIteration:
            self._done = True
            raise
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        chunk = _convert.stream_chunk(response)
        if chunk.final is not None:
            self._done = True
        return chunk

    def cancel(self) -> None:
        """Cancels the request on the server if it is still running."""
        if not self._done:
            self._done = True
            self._call.cancel()

    def __enter__(self) -> "GenerateStream":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()

    def __del__(self):
        try:
            self.cancel()
        except Exception:  # interpreter shutdown: nothing left to cancel
            pass
