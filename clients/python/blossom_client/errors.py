"""gRPC status -> Python exceptions.

Every failed RPC surfaces as a BlossomError subclass chosen by the status code, so callers can
`except ResourceExhaustedError:` (queue full: retry later) without importing grpc. Codes without a
dedicated class raise BlossomError itself; `.code` always holds the grpc.StatusCode.
"""
from __future__ import annotations

import grpc


class BlossomError(Exception):
    """A failed Blossom RPC: `code` (grpc.StatusCode) and the server's `message`."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class InvalidArgumentError(BlossomError):
    """A request field is invalid; the message names it. Do not retry unchanged."""


class NotFoundError(BlossomError):
    """E.g. `model` does not match the served model."""


class ResourceExhaustedError(BlossomError):
    """The server's queue is full: retry later, with backoff."""


class UnavailableError(BlossomError):
    """The server is loading, draining, or unreachable."""


class DeadlineExceededError(BlossomError):
    """The call's timeout passed (the server cancels the request)."""


class CancelledError(BlossomError):
    """The RPC was cancelled (by the server, or by this client through the stream's cancel())."""


class UnauthenticatedError(BlossomError):
    """Missing or wrong api_key."""


class PermissionDeniedError(BlossomError):
    pass


class FailedPreconditionError(BlossomError):
    pass


class UnimplementedError(BlossomError):
    """The server does not implement this RPC (e.g. an older server)."""


class InternalError(BlossomError):
    pass


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
}


def from_rpc_error(error: grpc.RpcError) -> BlossomError:
    """The BlossomError for a grpc.RpcError (sync or grpc.aio)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, BlossomError)
    return cls(code, details or "")
