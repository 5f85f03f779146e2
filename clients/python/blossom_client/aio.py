"""The asyncio client (grpc.aio), mirroring BlossomClient."""
from __future__ import annotations

from typing import Optional, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from blossom_client import _convert, results
from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from blossom_client._proto.blossom.v1 import blossom_pb2_grpc as pb_grpc
from blossom_client.errors import from_rpc_error

_UNSET = object()


class AsyncBlossomClient:
    """asyncio client for one Blossom server; same arguments and methods as BlossomClient, as
    coroutines. Create and use it inside one running event loop (grpc.aio binds the channel to
    it). `generate_stream` returns an async iterator (not a coroutine): `async for chunk in
    client.generate_stream(...)`."""

    def __init__(self, target: str, api_key: Optional[str] = None,
                 timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None):
        _convert.deadline(timeout)  # a bad default fails here, not at the first call
        self._timeout = timeout
        self._metadata = _convert.metadata(api_key)
        options = _convert.channel_options(options)
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=options)
        self._stub = pb_grpc.BlossomStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _deadline(self, timeout):
        return _convert.deadline(self._timeout if timeout is _UNSET else timeout)

    async def _unary(self, rpc, request, timeout):
        """One unary call with this client's deadline and metadata; errors as BlossomError."""
        try:
            return await rpc(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def generate(self, prompt: _convert.Prompt, *, timeout=_UNSET,
                       **params) -> results.GenerateResult:
        request = _convert.build_generate_request("generate", prompt, params)
        return _convert.generate_result(await self._unary(self._stub.Generate, request, timeout))

    def generate_stream(self, prompt: _convert.Prompt, *, timeout=_UNSET,
                        **params) -> "AsyncGenerateStream":
        request = _convert.build_stream_request(prompt, params)
        call = self._stub.GenerateStream(request, timeout=self._deadline(timeout),
                                         metadata=self._metadata)
        return AsyncGenerateStream(call)

    async def beam_search(self, prompt: _convert.Prompt, beam_width: int, *, timeout=_UNSET,
                    **params) -> results.BeamSearchResult:
        """Beam search as Hugging Face's generate(num_beams=beam_width, do_sample=False): the
        best num_return_sequences (default: every) beams, best first. Keywords:
        num_return_sequences, length_penalty, early_stopping (False, True or "never"),
        logprobs (each token's), max_new_tokens, min_new_tokens, ignore_eos, stop_token_ids,
        include_stop_in_output, skip_special_tokens, and the request fields of generate()."""
        request = _convert.build_beam_search_request(prompt, beam_width, params)
        response = await self._unary(self._stub.BeamSearch, request, timeout)
        return _convert.beam_search_result(response)

    async def tokenize(self, text: str, add_special_tokens: bool = False, *,
                       timeout=_UNSET) -> results.TokenizeResult:
        request = pb.TokenizeRequest(text=text, add_special_tokens=add_special_tokens)
        return _convert.tokenize_result(await self._unary(self._stub.Tokenize, request, timeout))

    async def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = False, *,
                         timeout=_UNSET) -> str:
        request = _convert.build_detokenize_request(ids, skip_special_tokens)
        return (await self._unary(self._stub.Detokenize, request, timeout)).text

    async def model_info(self, *, timeout=_UNSET) -> results.ModelInfo:
        return _convert.model_info(
            await self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), timeout))

    async def health(self, service: str = "", *, timeout=_UNSET) -> str:
        response = await self._unary(self._health.Check,
                                     health_pb2.HealthCheckRequest(service=service), timeout)
        return _convert.health_status_name(response.status)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncBlossomClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class AsyncGenerateStream:
    """An async iterator of StreamChunk over one GenerateStream call (one consumer).

    Leaving the `async for` early cancels the request on the server at once: the iterator is
    dropped, and __del__ cancels the call (an async generator would only be closed later, by the
    event loop's finaliser). cancel() and `async with` do the same explicitly."""

    def __init__(self, call):
        self._call = call
        self._done = False

    def __aiter__(self) -> "AsyncGenerateStream":
        return self

    async def __anext__(self) -> results.StreamChunk:
        if self._done:
            raise StopAsyncIteration
        try:
            response = await self._call.read()
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        if response is grpc.aio.EOF:
            self._done = True
            raise StopAsyncIteration
        chunk = _convert.stream_chunk(response)
        if chunk.final is not None:
            self._done = True
        return chunk

    def cancel(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    async def __aenter__(self) -> "AsyncGenerateStream":
        return self

    async def __aexit__(self, *exc) -> None:
        self.cancel()

    def __del__(self):
        try:
            self.cancel()
        except Exception:  # loop already closed: the call died with it
            pass
