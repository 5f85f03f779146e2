"""Python client for the Blossom inference server's gRPC API (blossom.v1).

    from blossom_client import BlossomClient
    with BlossomClient("localhost:8033") as client:
        print(client.generate("Hello", max_new_tokens=16, temperature=0).text)
"""
from blossom_client._convert import BEAM_SEARCH_PARAMETERS, GENERATE_PARAMETERS
from blossom_client.aio import AsyncBlossomClient, AsyncGenerateStream
from blossom_client.client import BlossomClient, GenerateStream
from blossom_client.errors import (BlossomError, CancelledError, DeadlineExceededError,
                                   FailedPreconditionError, InternalError, InvalidArgumentError,
                                   NotFoundError, PermissionDeniedError, ResourceExhaustedError,
                                   UnauthenticatedError, UnavailableError, UnimplementedError)
from blossom_client.results import (Beam, BeamSearchResult, FinalInfo, GenerateResult, ModelInfo, ModelLimits,
                                    StreamChunk, Timings, Token, TokenizeResult, TopLogprob,
                                    Usage)

__version__ = "0.1.0"

__all__ = [
    "AsyncBlossomClient", "AsyncGenerateStream", "BEAM_SEARCH_PARAMETERS", "Beam",
    "BeamSearchResult", "BlossomClient", "BlossomError",
    "CancelledError", "DeadlineExceededError", "FailedPreconditionError", "FinalInfo",
    "GENERATE_PARAMETERS", "GenerateResult", "GenerateStream", "InternalError",
    "InvalidArgumentError", "ModelInfo", "ModelLimits", "NotFoundError", "PermissionDeniedError",
    "ResourceExhaustedError", "StreamChunk", "Timings", "Token", "TokenizeResult", "TopLogprob",
    "UnauthenticatedError", "UnavailableError", "UnimplementedError", "Usage",
]
