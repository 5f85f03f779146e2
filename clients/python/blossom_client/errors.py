"""gRPC status -> Python exceptions.

Every failed RPC surfaces as a BlossomError subclass chosen by the status code, so callers can
`except ResourceExhaustedError:` (queue full: retry later) without importing grpc. Codes without a
dedicated class raise BlossomError itself; `.code` always holds the grpc.StatusCode. The server's
google.rpc details (proto/README.md) come along: `.field` (BadRequest), `.reason` and `.domain`
(ErrorInfo: match on these, not on the message) and `.retry_delay` (RetryInfo, seconds; None
when the server does not invite a retry, e.g. MODEL_FAILED against MODEL_LOADING).
"""
from __future__ import annotations

from typing import Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"


class BlossomError(Exception):
    """A failed Blossom RPC: `code` (grpc.StatusCode), the server's `message`, and its details:
    `field`, `reason`, `domain` and `retry_delay` (None where the server sent none)."""

    def __init__(self, code: grpc.StatusCode, message: str, *, field: Optional[str] = None,
                 reason: Optional[str] = None, domain: Optional[str] = None,
                 retry_delay: Optional[float] = None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.field = field
        self.reason = reason
        self.domain = domain
        self.retry_delay = retry_delay

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


def _status_details(error: grpc.RpcError) -> dict:
    """field / reason / domain / retry_delay from the trailer's google.rpc.Status, if any."""
    out = {}
    try:
        trailers = error.trailing_metadata() or ()
    except Exception:  # not a call (e.g. a channel error): no trailers to read
        return out
    for key, value in trailers:
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed trailer loses the details, not the error
            return out
        for detail in status.details:
            bad_request = error_details_pb2.BadRequest()
            info = error_details_pb2.ErrorInfo()
            retry = error_details_pb2.RetryInfo()
            if detail.Unpack(bad_request) and bad_request.field_violations:
                out["field"] = bad_request.field_violations[0].field
            elif detail.Unpack(info):
                out["reason"], out["domain"] = info.reason, info.domain
            elif detail.Unpack(retry):
                out["retry_delay"] = retry.retry_delay.ToTimedelta().total_seconds()
    return out


def from_rpc_error(error: grpc.RpcError) -> BlossomError:
    """The BlossomError for a grpc.RpcError (sync or grpc.aio), with the server's details."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, BlossomError)
    return cls(code, details or "", **_status_details(error))
