"""Plain result types (dataclasses), so callers never touch protobuf messages.

Scalar-only types are filled field by field from the message of the same shape (see
_convert.fill): a field the server's proto lacks keeps its default here, and a field this client
does not know yet is ignored, so client and server versions can differ.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    cached_prompt_tokens: int = 0


@dataclass(frozen=True)
class Timings:
    queue_seconds: float = 0.0
    time_to_first_token_seconds: float = 0.0
    total_seconds: float = 0.0
    time_per_output_token_seconds: float = 0.0
    preemptions: int = 0


@dataclass(frozen=True)
class TopLogprob:
    token_id: int
    token: str
    logprob: float
    special: bool = False  # one of the tokenizer's special tokens (</s>, <pad>, ...)
    token_bytes: bytes = b""  # the token's exact bytes (`token` may be part of a character)


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    # None unless logprobs were requested.
    logprob: Optional[float] = None
    top_logprobs: List[TopLogprob] = field(default_factory=list)
    # Prompt logprobs only: the number of tokens at least as likely there (itself included);
    # else None.
    rank: Optional[int] = None
    special: bool = False  # one of the tokenizer's special tokens (</s>, <pad>, ...)
    # The token's exact bytes: `text` renders a token holding part of a UTF-8 character lossily.
    token_bytes: bytes = b""


@dataclass(frozen=True)
class FinalInfo:
    # "length", "eos_token", "stop_token", "stop_string", "cancelled", "error"; None if unset.
    finish_reason: Optional[str] = None
    matched_stop: str = ""
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    seed: int = 0
    request_id: str = ""
    prompt_token_ids: List[int] = field(default_factory=list)
    # The server's configuration ("blossom-<version>-<dtype>"), stable while it runs.
    system_fingerprint: str = ""
    # The bound on generated tokens the request ran with: max_new_tokens, or with
    # max_new_tokens_to_limit and no max_new_tokens, what fits the context.
    max_new_tokens: int = 0


@dataclass(frozen=True)
class GenerateResult:
    text: str
    tokens: List[Token]
    finish_reason: Optional[str]
    usage: Usage
    timings: Timings
    # The seed the server used (the one passed, or the random one it drew).
    seed: int
    matched_stop: str
    request_id: str
    prompt_token_ids: List[int]
    final: FinalInfo
    # With prompt_logprobs=N: every prompt token (the first without a logprob), each with its
    # logprob, rank and N alternatives; else empty.
    prompt_logprobs: List[Token] = field(default_factory=list)


@dataclass(frozen=True)
class Beam:
    text: str
    # The new tokens, an end token (EOS or a stop token id) that finished the beam included.
    tokens: List[Token]
    # Hugging Face's sequences_scores: cumulative_logprob / len(tokens) ** length_penalty.
    score: float
    cumulative_logprob: float
    finish_reason: Optional[str]  # "eos_token", "stop_token" or "length"


@dataclass(frozen=True)
class BeamSearchResult:
    beams: List[Beam]  # best first
    # prompt_tokens; generated_tokens: the beams' tokens together; cached_prompt_tokens: the
    # prompt's tokens found in the prefix cache.
    usage: Usage
    request_id: str
    prompt_token_ids: List[int]
    system_fingerprint: str
    total_seconds: float
    steps: int


@dataclass(frozen=True)
class StreamChunk:
    # Text safe to display now (never half a UTF-8 character); may be empty while held back.
    text_delta: str
    token: Optional[Token]
    # Set on the last chunk only.
    final: Optional[FinalInfo] = None
    # With prompt_logprobs=N: on the first chunk with a token (as GenerateResult's); else empty.
    prompt_logprobs: List[Token] = field(default_factory=list)

    @property
    def is_final(self) -> bool:
        return self.final is not None


@dataclass(frozen=True)
class TokenizeResult:
    ids: List[int]
    tokens: List[str]
    # [start, end) byte offsets into the UTF-8 text, one per token.
    offsets: List[Tuple[int, int]]
    # The server's limit on prompt plus new tokens (0 from a server that does not say).
    max_total_tokens: int = 0


@dataclass(frozen=True)
class ModelLimits:
    max_input_tokens: int = 0
    max_total_tokens: int = 0
    max_new_tokens: int = 0
    max_batch_size: int = 0
    max_batched_tokens: int = 0
    max_waiting_requests: int = 0
    max_stop_strings: int = 0
    max_logprobs: int = 0


@dataclass(frozen=True)
class ModelInfo:
    model_id: str = ""
    model_dir: str = ""
    dtype: str = ""
    backend: str = ""
    tensor_parallel_size: int = 0
    vocab_size: int = 0
    hidden_size: int = 0
    num_layers: int = 0
    num_heads: int = 0
    # None when the model has none (absent in the response, not 0).
    eos_token_id: Optional[int] = None
    bos_token_id: Optional[int] = None
    limits: ModelLimits = field(default_factory=ModelLimits)
    kv_block_size: int = 0
    kv_blocks_total: int = 0
    version: str = ""
