"""Typed exceptions. Every error the SDK raises is a PgferryError with a stable `code`
(the server's machine-readable code when it sent one) and, where known, the offending
`field` (e.g. "jobs[3].queue")."""

from __future__ import annotations

import re
from typing import Any, Final

import grpc


class PgferryError(Exception):
    """Base class. `code` is stable and machine-readable; `field` names the bad input."""

    default_code: str = "internal"

    def __init__(self, message: str, *, code: str | None = None, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.field = field

    def __str__(self) -> str:
        extra = f" (field {self.field})" if self.field else ""
        return f"{self.code}: {self.message}{extra}"


class AuthError(PgferryError):
    """The API key is missing, malformed, unknown or revoked."""

    default_code = "unauthenticated"


class PermissionDenied(AuthError):
    """The API key is valid but lacks the scope for this call."""

    default_code = "permission_denied"


class NotFound(PgferryError):
    default_code = "not_found"


class InvalidArgument(PgferryError):
    default_code = "invalid_argument"


class Conflict(PgferryError):
    default_code = "conflict"


class RateLimited(PgferryError):
    """Too many requests for this key; `retry_after` (seconds) when the server said."""

    default_code = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, field=field)
        self.retry_after = retry_after


class PayloadTooLarge(InvalidArgument):
    default_code = "payload_too_large"


class Unavailable(PgferryError):
    """The server could not be reached, or the connection dropped before an answer.

    For an enqueue this means the outcome is unknown: the jobs may or may not have been
    committed. Use a unique_key to make a retry safe."""

    default_code = "unavailable"


class Unimplemented(PgferryError):
    """The server does not offer this call or option (yet)."""

    default_code = "not_implemented"


class ProtocolError(PgferryError):
    """The server answered something this SDK does not understand."""

    default_code = "protocol_error"


class JobFailed(PgferryError):
    """Awaiting a job's result: the job ended without one. `job` is the job as the server
    reports it (attempts with their errors); `error` and `error_kind` are the last
    attempt's. Catch this for "did not complete"; the subclasses say how."""

    default_code = "job_failed"

    def __init__(self, message: str, *, job: Any, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.job = job
        last = job.attempts[-1] if getattr(job, "attempts", None) else None
        self.error: str = last.error if last is not None else ""
        kind = last.error_kind if last is not None else ""
        if not kind and self.error:
            # The HTTP API has no error_kind: the server writes the kind in front.
            m = re.match(r"([A-Za-z_][A-Za-z0-9_.]*): ", self.error)
            kind = m.group(1) if m else ""
        self.error_kind: str = kind


class JobDead(JobFailed):
    """The job ran out of attempts, or failed permanently, and is in the dead-letter queue."""

    default_code = "job_dead"


class JobCancelledError(JobFailed):
    """The job was cancelled (by the API, a handler's Cancel, or a worker's JobCancelled)."""

    default_code = "job_cancelled"


class ResultTimeout(PgferryError, TimeoutError):
    """The job did not finish within the `timeout` given to `result()`; it may still."""

    default_code = "result_timeout"


class TaskArgumentError(InvalidArgument, TypeError):
    """Arguments given to a task's enqueue do not fit the task function's signature (or
    its pydantic models, or are not JSON). Raised in the caller; nothing is enqueued."""

    default_code = "invalid_task_arguments"


_BY_CODE: Final[dict[str, type[PgferryError]]] = {
    "unauthenticated": AuthError,
    "unauthorized": AuthError,
    "permission_denied": PermissionDenied,
    "forbidden": PermissionDenied,
    "not_found": NotFound,
    "invalid_argument": InvalidArgument,
    "bad_request": InvalidArgument,
    "malformed": InvalidArgument,
    "payload_too_large": PayloadTooLarge,
    "too_large": PayloadTooLarge,
    "conflict": Conflict,
    "already_exists": Conflict,
    "rate_limited": RateLimited,
    "too_many_requests": RateLimited,
    "unavailable": Unavailable,
    "not_implemented": Unimplemented,
    "unimplemented": Unimplemented,
}

_BY_STATUS: Final[dict[grpc.StatusCode, type[PgferryError]]] = {
    grpc.StatusCode.UNAUTHENTICATED: AuthError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.CANCELLED: Unavailable,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


def class_for_code(code: str) -> type[PgferryError]:
    """The exception class for a server error code; unknown codes map by family
    (e.g. "invalid_json" → InvalidArgument) and otherwise to PgferryError."""
    exact = _BY_CODE.get(code)
    if exact is not None:
        return exact
    if code.startswith("invalid") or code.startswith("malformed") or code.startswith("missing"):
        return InvalidArgument
    if code.endswith("not_found") or code.startswith("unknown_"):
        return NotFound
    if code.endswith("too_large"):
        return PayloadTooLarge
    return PgferryError


def from_error(code: str, message: str, field: str = "") -> PgferryError:
    """Build the typed exception for a pgferry.v1.Error."""
    cls = class_for_code(code)
    return cls(message or code, code=code or cls.default_code, field=field)


def _metadata_get(md: object, key: str) -> str | None:
    if md is None:
        return None
    try:
        for k, v in md:  # type: ignore[attr-defined]
            if k == key:
                return v.decode() if isinstance(v, bytes) else str(v)
    except TypeError:
        return None
    return None


def from_rpc_error(err: grpc.RpcError) -> PgferryError:
    """Translate a gRPC status into a typed exception.

    The server may attach a pgferry.v1.Error as the status details (grpc-status-details-bin)
    carrying the stable code and field; when it does, they win over the status code."""
    code_fn = getattr(err, "code", None)
    status = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details_fn = getattr(err, "details", None)
    message = (details_fn() if callable(details_fn) else None) or str(status)
    trailing_fn = getattr(err, "trailing_metadata", None)
    trailing = trailing_fn() if callable(trailing_fn) else None
    code = ""
    field = ""
    raw = _metadata_get_bytes(trailing, "grpc-status-details-bin")
    if raw:
        code, field, msg2 = _decode_error_details(raw)
        if msg2:
            message = msg2
    if not code:
        code = _metadata_get(trailing, "pgferry-error-code") or ""
    if not field:
        field = _metadata_get(trailing, "pgferry-error-field") or ""
    if not code and not field:
        code, field, message = _parse_status_message(message)
    cls = class_for_code(code) if code else _BY_STATUS.get(status, PgferryError)
    if cls is PgferryError and not code:
        cls = _BY_STATUS.get(status, PgferryError)
    if cls is RateLimited:
        ra = _metadata_get(trailing, "retry-after")
        return RateLimited(
            message, code=code or None, field=field, retry_after=_float_or_none(ra)
        )
    return cls(message, code=code or None, field=field)


# The Admin service's status messages: `code: message (field)` (docs/protocol.md).
_STATUS_MESSAGE: Final = re.compile(r"([a-z_]+): (.*?)(?: \(([A-Za-z0-9_.\[\]]+)\))?", re.S)


def _parse_status_message(message: str) -> tuple[str, str, str]:
    """(code, field, message) from a `code: message (field)` status message; ("", "",
    message) when it is not one, or its code is not one this SDK knows."""
    m = _STATUS_MESSAGE.fullmatch(message)
    if m is None or class_for_code(m[1]) is PgferryError:
        return "", "", message
    return m[1], m[3] or "", m[2]


def _float_or_none(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _metadata_get_bytes(md: object, key: str) -> bytes | None:
    if md is None:
        return None
    try:
        for k, v in md:  # type: ignore[attr-defined]
            if k == key:
                return v if isinstance(v, bytes) else str(v).encode()
    except TypeError:
        return None
    return None


def _decode_error_details(raw: bytes) -> tuple[str, str, str]:
    """(code, field, message) when the status details are a bare pgferry.v1.Error
    (tonic's Status::with_details); anything else yields empty strings."""
    from pgferry.v1 import common_pb2

    try:
        e = common_pb2.Error.FromString(raw)
    except Exception:  # details in another encoding: keep the status code mapping
        return "", "", ""
    if e.code and e.code.replace("_", "").isalnum():
        return e.code, e.field, e.message
    return "", "", ""
