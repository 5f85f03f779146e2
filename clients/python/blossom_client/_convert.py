"""Keyword parameters -> GenerateRequest, and proto responses -> result dataclasses.

Shared by the sync and asyncio clients. A parameter left out (or passed as None) leaves its
`optional` proto field absent, so the server applies its default; 0 is sent as an explicit 0
(temperature=0 means greedy, an absent temperature means the server's default 1.0).
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from typing import Any, Dict, Iterable, Sequence, Union

from blossom_client._proto.blossom.v1 import blossom_pb2 as pb
from blossom_client import results

Prompt = Union[str, Sequence[int]]

# Keyword -> field of SamplingParameters (all `optional` in the proto).
_SAMPLING = ("temperature", "top_k", "top_p", "typical_p", "min_p", "repetition_penalty",
             "frequency_penalty", "presence_penalty", "seed", "logprobs", "prompt_logprobs")
# Keyword -> repeated field of SamplingParameters, and its one map field (token id -> bias).
_SAMPLING_REPEATED = ("allowed_token_ids", "bad_words", "guided_choice")
_SAMPLING_MAP = ("logit_bias",)
# Structured output: json_schema is a JSON Schema as a dict (or bool) or as its text;
# json_compact leaves whitespace out of the JSON text; regex is a pattern the output matches;
# grammar is a GBNF grammar whose `root` the output is.
_SAMPLING_JSON = ("json_schema", "json_compact", "regex", "grammar")
# Keyword -> field of StoppingParameters.
_STOPPING_SCALAR = ("max_new_tokens", "min_new_tokens", "ignore_eos", "include_stop_in_output",
                    "skip_special_tokens", "max_new_tokens_to_limit", "stop_at_text_end")
_STOPPING_REPEATED = ("stop", "stop_token_ids")
# Keyword -> field of GenerateRequest itself.
_REQUEST = ("priority", "model", "request_id", "return_prompt_tokens", "truncate_prompt_tokens")

GENERATE_PARAMETERS = frozenset(_SAMPLING + _SAMPLING_REPEATED + _SAMPLING_MAP + _SAMPLING_JSON +
                                _STOPPING_SCALAR + _STOPPING_REPEATED + _REQUEST)
# beam_search(): fields of BeamSearchRequest (skip_special_tokens goes to its stopping).
_BEAM = ("num_return_sequences", "length_penalty", "logprobs")
_EARLY_STOPPING = {False: "HEURISTIC", True: "WHEN_FULL", "heuristic": "HEURISTIC",
                   "when_full": "WHEN_FULL", "never": "NEVER"}
BEAM_SEARCH_PARAMETERS = frozenset(_BEAM + ("early_stopping",) + _STOPPING_SCALAR +
                                   ("stop_token_ids",) + _REQUEST)


def _check_scalar(message, name: str, value) -> None:
    """TypeError unless `value` is of the proto field's own kind: protobuf would coerce
    True to 1.0 or 1 and 5 to a bool, silently changing the request."""
    field = message.DESCRIPTOR.fields_by_name[name]
    cpp = field.cpp_type
    if cpp == field.CPPTYPE_BOOL:
        ok = isinstance(value, bool)
        kind = "a bool"
    elif cpp in (field.CPPTYPE_FLOAT, field.CPPTYPE_DOUBLE):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        kind = "a number"
    elif cpp in (field.CPPTYPE_INT32, field.CPPTYPE_INT64, field.CPPTYPE_UINT32,
                 field.CPPTYPE_UINT64, field.CPPTYPE_ENUM):
        ok = isinstance(value, int) and not isinstance(value, bool)
        kind = "an int"
    else:
        ok = isinstance(value, str)
        kind = "a str"
    if not ok:
        raise TypeError(f"must be {kind}, not {type(value).__name__}")


def _set_scalar(message, name: str, value) -> None:
    _check_scalar(message, name, value)
    setattr(message, name, value)


def _token_id(key) -> int:
    """logit_bias keys: ints, or their decimal text (as JSON object keys arrive)."""
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TypeError(f"keys must be token ids (int), not {type(key).__name__}")
    return int(key)


def build_generate_request(method: str, prompt: Prompt, params: Dict[str, Any]) -> pb.GenerateRequest:
    """Raises TypeError for an unknown keyword or a wrongly typed prompt/value."""
    unknown = sorted(set(params) - GENERATE_PARAMETERS)
    if unknown:
        raise TypeError(f"{method}() got unexpected keyword argument(s): {', '.join(unknown)}")
    request = pb.GenerateRequest()
    _set_prompt(method, request, prompt)
    for name, value in params.items():
        if value is None:
            continue
        try:
            if name in _SAMPLING:
                _set_scalar(request.sampling, name, value)
            elif name in _SAMPLING_REPEATED:
                if isinstance(value, str):
                    raise TypeError("must be a list, not a str")
                getattr(request.sampling, name).extend(value)
            elif name == "json_schema":
                request.sampling.json_schema = value if isinstance(value, str) else json.dumps(value)
            elif name in ("json_compact", "regex", "grammar"):
                _set_scalar(request.sampling, name, value)
            elif name in _SAMPLING_MAP:
                for token, bias in dict(value).items():
                    if isinstance(bias, bool) or not isinstance(bias, (int, float)):
                        raise TypeError(f"biases must be numbers, not {type(bias).__name__}")
                    getattr(request.sampling, name)[_token_id(token)] = bias
            elif name in _STOPPING_SCALAR:
                _set_scalar(request.stopping, name, value)
            elif name in _STOPPING_REPEATED:
                if name == "stop" and isinstance(value, str):
                    value = [value]  # stop="###" is the common spelling of one stop string
                getattr(request.stopping, name).extend(value)
            else:
                _set_scalar(request, name, value)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{method}() parameter {name}={value!r}: {e}") from None
    return request


def _set_prompt(method: str, request, prompt: Prompt) -> None:
    if isinstance(prompt, str):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 text holds it
            raise ValueError(f"{method}() prompt is not valid Unicode text: {e}") from None
        request.text = prompt
    elif isinstance(prompt, (list, tuple)) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(not -2**31 <= t < 2**31 for t in prompt):
            raise ValueError(f"{method}() prompt token ids must fit in 32 bits")
        request.token_ids.ids.extend(prompt)
        # An empty id list must still select the token_ids arm of the oneof (the server then
        # rejects it with a clear message rather than seeing "no prompt").
        request.token_ids.SetInParent()
    else:
        raise TypeError(f"{method}() prompt must be a str or a list of int token ids, "
                        f"not {type(prompt).__name__}")


def build_detokenize_request(ids: Sequence[int], skip_special_tokens: bool) -> pb.DetokenizeRequest:
    """Raises TypeError (not a list of int ids, or a non-bool flag) or ValueError (an id that
    does not fit in 32 bits) naming the parameter, as generate() does for its prompt."""
    try:
        ids = None if isinstance(ids, (str, bytes)) else list(ids)
    except TypeError:
        ids = None
    # Any integer type (numpy's too), never a bool.
    if ids is None or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
        raise TypeError("detokenize() ids must be a list of int token ids")
    ids = [int(t) for t in ids]
    if any(not -2**31 <= t < 2**31 for t in ids):
        raise ValueError("detokenize() ids must fit in 32 bits")
    if not isinstance(skip_special_tokens, bool):
        raise TypeError("detokenize() skip_special_tokens must be a bool, "
                        f"not {type(skip_special_tokens).__name__}")
    return pb.DetokenizeRequest(ids=ids, skip_special_tokens=skip_special_tokens)


def build_beam_search_request(prompt: Prompt, beam_width: int,
                              params: Dict[str, Any]) -> pb.BeamSearchRequest:
    """Raises TypeError for an unknown keyword or a wrongly typed prompt/value."""
    unknown = sorted(set(params) - BEAM_SEARCH_PARAMETERS)
    if unknown:
        raise TypeError(f"beam_search() got unexpected keyword argument(s): {', '.join(unknown)}")
    request = pb.BeamSearchRequest()
    _set_prompt("beam_search", request, prompt)
    try:
        _set_scalar(request, "beam_width", beam_width)
    except (TypeError, ValueError) as e:
        raise TypeError(f"beam_search() beam_width={beam_width!r}: {e}") from None
    for name, value in params.items():
        if value is None:
            continue
        try:
            if name == "early_stopping":
                if value not in _EARLY_STOPPING:
                    raise ValueError("must be True, False, 'heuristic', 'when_full' or 'never'")
                request.early_stopping = pb.EarlyStopping.Value(
                    "EARLY_STOPPING_" + _EARLY_STOPPING[value])
            elif name in _BEAM:
                _set_scalar(request, name, value)
            elif name in _STOPPING_SCALAR:
                _set_scalar(request.stopping, name, value)
            elif name == "stop_token_ids":
                request.stopping.stop_token_ids.extend(value)
            else:
                _set_scalar(request, name, value)
        except (TypeError, ValueError) as e:
            raise TypeError(f"beam_search() parameter {name}={value!r}: {e}") from None
    return request


def beam_search_result(r: pb.BeamSearchResponse) -> results.BeamSearchResult:
    return results.BeamSearchResult(
        beams=[results.Beam(text=b.text, tokens=[token(t) for t in b.tokens], score=b.score,
                            cumulative_logprob=b.cumulative_logprob,
                            finish_reason=finish_reason(b.finish_reason)) for b in r.beams],
        usage=fill(results.Usage, r.usage), request_id=r.request_id,
        prompt_token_ids=list(r.prompt_token_ids), system_fingerprint=r.system_fingerprint,
        total_seconds=r.total_seconds, steps=r.steps)


def finish_reason(value: int):
    """FINISH_REASON_STOP_STRING -> "stop_string"; UNSPECIFIED -> None."""
    if value == pb.FINISH_REASON_UNSPECIFIED:
        return None
    try:
        return pb.FinishReason.Name(value)[len("FINISH_REASON_"):].lower()
    except ValueError:  # a newer server's reason this client does not know yet
        return f"unknown_{value}"


def _optional(message, name):
    """The field's value, or None when absent (or unknown to an older server's proto)."""
    if name not in message.DESCRIPTOR.fields_by_name or not message.HasField(name):
        return None
    return getattr(message, name)


def token(t: pb.Token) -> results.Token:
    return results.Token(
        id=t.id, text=t.text, logprob=_optional(t, "logprob"),
        top_logprobs=[results.TopLogprob(x.token_id, x.token, x.logprob,
                                         bool(getattr(x, "special", False)), x.token_bytes)
                      for x in t.top_logprobs],
        rank=_optional(t, "rank"), special=bool(getattr(t, "special", False)),
        token_bytes=t.token_bytes)


def fill(cls, message, **overrides):
    """cls(**fields) from the message's fields of the same names (scalars and repeated
    scalars); an `optional` field that is absent becomes None. Fields the message does not have
    keep cls's defaults."""
    names = message.DESCRIPTOR.fields_by_name
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides or f.name not in names:
            continue
        descriptor = names[f.name]
        if descriptor.message_type is not None:
            continue  # nested messages are converted by the caller
        if descriptor.has_presence and not message.HasField(f.name):
            kwargs[f.name] = None
        elif _is_repeated(descriptor):
            kwargs[f.name] = list(getattr(message, f.name))
        else:
            kwargs[f.name] = getattr(message, f.name)
    kwargs.update(overrides)
    return cls(**kwargs)


def _is_repeated(descriptor) -> bool:
    # FieldDescriptor.is_repeated is new (protobuf 5.x+); label is the older spelling.
    flag = getattr(descriptor, "is_repeated", None)
    if flag is not None:
        return flag() if callable(flag) else bool(flag)
    return descriptor.label == descriptor.LABEL_REPEATED


def build_stream_request(prompt: Prompt, params: Dict[str, Any]) -> pb.GenerateStreamRequest:
    """GenerateStream's request: the same fields as GenerateRequest (blossom.proto declares the
    two alike), so the same bytes."""
    request = build_generate_request("generate_stream", prompt, params)
    return pb.GenerateStreamRequest.FromString(request.SerializeToString())


def final_info(f: pb.FinalInfo) -> results.FinalInfo:
    return fill(results.FinalInfo, f, finish_reason=finish_reason(f.finish_reason),
                usage=fill(results.Usage, f.usage), timings=fill(results.Timings, f.timings))


def generate_result(r: pb.GenerateResponse) -> results.GenerateResult:
    f = final_info(r.final)
    return results.GenerateResult(
        text=r.text, tokens=[token(t) for t in r.tokens], finish_reason=f.finish_reason,
        usage=f.usage, timings=f.timings, seed=f.seed, matched_stop=f.matched_stop,
        request_id=f.request_id, prompt_token_ids=f.prompt_token_ids, final=f,
        prompt_logprobs=[token(t) for t in r.prompt_logprobs])


def stream_chunk(r: pb.GenerateStreamResponse) -> results.StreamChunk:
    return results.StreamChunk(
        text_delta=r.text_delta, token=token(r.token) if r.HasField("token") else None,
        final=final_info(r.final) if r.HasField("final") else None,
        prompt_logprobs=[token(t) for t in r.prompt_logprobs])


def tokenize_result(r: pb.TokenizeResponse) -> results.TokenizeResult:
    return results.TokenizeResult(ids=list(r.ids), tokens=list(r.tokens),
                                  offsets=[(s.start, s.end) for s in r.offsets],
                                  max_total_tokens=r.max_total_tokens)


def model_info(m: pb.ModelInfo) -> results.ModelInfo:
    return fill(results.ModelInfo, m, limits=fill(results.ModelLimits, m.limits))


def deadline(timeout):
    """A call's timeout for grpc: None, 0 or infinity is no deadline (0 as in the C++ CLI and
    server flags, where 0 means none); NaN or a negative is a ValueError and a non-number a
    TypeError, naming it (grpc would fail the call at once instead)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not timeout >= 0:  # also NaN
        raise ValueError(f"timeout must be >= 0 seconds (0 = no deadline), got {timeout!r}")
    if timeout == 0 or timeout == math.inf:
        return None
    return timeout


def metadata(api_key) -> Iterable:
    """Call metadata: the API key as a bearer token (works on plaintext channels too)."""
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


_MAX_RECEIVE = "grpc.max_receive_message_length"
_KEEPALIVE_TIME = "grpc.keepalive_time_ms"
_KEEPALIVE_TIMEOUT = "grpc.keepalive_timeout_ms"
_PING_TIMEOUT = "grpc.http2.ping_timeout_ms"
_MAX_PINGS_WITHOUT_DATA = "grpc.http2.max_pings_without_data"

# Keepalive: without it a call whose server vanished without closing the connection (a network
# partition, a host powered off) waits forever when it has no deadline, e.g. a generate_stream.
# blossom-server keeps gRPC's server ping policy (it sets none of its arguments): a ping that
# comes less than 5 minutes (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS) after the
# previous one, with no data sent by the server in between, is a strike, and the third strike
# closes the connection with GOAWAY too_many_pings. So pings (sent only while a call is open and
# the server has been silent) go no more often than that, with a margin for timer slack.
SERVER_MIN_PING_INTERVAL_MS = 5 * 60 * 1000
KEEPALIVE_TIME_MS = SERVER_MIN_PING_INTERVAL_MS + 30 * 1000
# How long an unanswered ping waits before the connection is dropped (the call then fails with
# UNAVAILABLE). gRPC's own default.
KEEPALIVE_TIMEOUT_MS = 20 * 1000


def channel_options(options) -> list:
    """The caller's channel options plus Blossom's defaults for those the caller did not set:

    - no limit on received messages: gRPC's 4 MiB default fails a unary answer with logprobs for
      a few thousand tokens;
    - keepalive pings every KEEPALIVE_TIME_MS of silence during a call, each answered within
      the keepalive timeout (KEEPALIVE_TIMEOUT_MS unless the caller set
      grpc.keepalive_timeout_ms) or the connection is dropped;
    - grpc.http2.ping_timeout_ms equal to that keepalive timeout: recent gRPC cores (grpcio
      1.85 measured) time an unanswered keepalive ping out by it (default 1 minute), not by
      grpc.keepalive_timeout_ms;
    - grpc.http2.max_pings_without_data 0 (no cap): the client sends no data after its request,
      and the default cap of 2 pings without data holds later pings back (by a minute in grpcio
      1.85, for good in older cores), so a call quiet for more than two keepalive periods (a
      long queue wait) would be watched late or not at all. The server's strikes depend only
      on the time between pings, which KEEPALIVE_TIME_MS keeps above its minimum.
    """
    merged = list(options or ())
    given = dict(merged)
    defaults = [
        (_MAX_RECEIVE, -1),
        (_KEEPALIVE_TIME, KEEPALIVE_TIME_MS),
        (_KEEPALIVE_TIMEOUT, KEEPALIVE_TIMEOUT_MS),
        (_PING_TIMEOUT, given.get(_KEEPALIVE_TIMEOUT, KEEPALIVE_TIMEOUT_MS)),
        (_MAX_PINGS_WITHOUT_DATA, 0),
    ]
    merged.extend((name, value) for name, value in defaults if name not in given)
    return merged


def health_status_name(status: int) -> str:
    from grpc_health.v1 import health_pb2
    return health_pb2.HealthCheckResponse.ServingStatus.Name(status)
