"""One hierarchy of mma2a errors, each mapped here to an A2A/JSON-RPC code and an HTTP status.

Every layer raises these; the gateway turns them into wire errors in one place
(`MMA2AError.to_jsonrpc`), so a user sees the same code and message on every binding.
"""

from __future__ import annotations

from typing import Any

# JSON-RPC 2.0 and A2A 1.0 error codes (A2A spec, section "Error handling").
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009


class MMA2AError(Exception):
    """Base of every error mma2a raises on purpose."""

    code: int = INTERNAL_ERROR
    http_status: int = 500

    def __init__(self, message: str, *, field: str | None = None, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.data = dict(data or {})
        if field is not None:
            self.data.setdefault("field", field)

    def to_jsonrpc(self) -> dict[str, Any]:
        """The JSON-RPC `error` object for this error."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err


class ParseError(MMA2AError):
    """The body is not valid JSON."""

    code, http_status = PARSE_ERROR, 400


class InvalidRequest(MMA2AError):
    """The body is JSON but not a valid request (JSON-RPC envelope, A2A message shape, limits)."""

    code, http_status = INVALID_REQUEST, 400


class MethodNotFound(MMA2AError):
    code, http_status = METHOD_NOT_FOUND, 404


class InvalidParams(MMA2AError):
    code, http_status = INVALID_PARAMS, 400


class ExtensionError(InvalidParams):
    """Extension metadata is malformed (bad field type, bad value)."""


class UnsupportedExtensionVersion(ExtensionError):
    """The message or part declares an extension protocol version this build does not speak."""

    code, http_status = VERSION_NOT_SUPPORTED, 400


class InvalidModality(ExtensionError):
    """A MIME type / modality string that does not parse."""


class FeatureSchemaError(ExtensionError):
    """Features that break their modality's feature schema."""


class UnknownModality(ExtensionError):
    """A modality asked for by name that the registry does not know."""


class RuleError(MMA2AError):
    """A rule file that does not validate; `errors` lists every problem found."""

    code, http_status = INVALID_PARAMS, 400

    def __init__(self, message: str, *, errors: list[str] | None = None):
        super().__init__(message, data={"errors": list(errors or [message])})
        self.errors = list(errors or [message])


class ContentTypeNotSupported(MMA2AError):
    """No agent accepts a part natively and no transform chain reaches one that does."""

    code, http_status = CONTENT_TYPE_NOT_SUPPORTED, 415


class AgentNotFound(MMA2AError):
    code, http_status = INVALID_PARAMS, 404


class TaskNotFound(MMA2AError):
    code, http_status = TASK_NOT_FOUND, 404


class TaskNotCancelable(MMA2AError):
    code, http_status = TASK_NOT_CANCELABLE, 409


class UnsupportedOperation(MMA2AError):
    code, http_status = UNSUPPORTED_OPERATION, 400


class DispatchError(MMA2AError):
    """A downstream agent failed, timed out or answered with something that is not A2A."""

    code, http_status = INVALID_AGENT_RESPONSE, 502


class PayloadError(MMA2AError):
    """A blob or stream could not be stored, read or verified."""

    code, http_status = INVALID_PARAMS, 400


class PayloadNotFound(PayloadError):
    code, http_status = INVALID_PARAMS, 404


class RangeNotSatisfiable(PayloadError):
    """A byte range or stream offset outside what is stored or still buffered."""

    http_status = 416


class UploadOffsetMismatch(PayloadError):
    """A resumable upload chunk sent at an offset other than the upload's current end."""

    http_status = 409


class SignatureError(PayloadError):
    """A signed URL or extension signature that is tampered with, expired or for another method."""

    http_status = 403


class URLForbidden(PayloadError):
    """The gateway refuses to fetch this URL (SSRF guard)."""

    http_status = 403


class Unauthorized(MMA2AError):
    code, http_status = INVALID_REQUEST, 401


class Forbidden(MMA2AError):
    code, http_status = INVALID_REQUEST, 403


class PayloadTooLarge(MMA2AError):
    code, http_status = INVALID_REQUEST, 413


class RateLimited(MMA2AError):
    code, http_status = INVALID_REQUEST, 429

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message, data={"retryAfter": retry_after})
        self.retry_after = retry_after


class MediaError(InvalidParams):
    """Media bytes that are corrupt, truncated, of the wrong type, or over a decoding limit."""


class ClusterError(MMA2AError):
    """Cluster mode (NATS JetStream) is misconfigured, unreachable, or refused an operation."""

    code, http_status = INTERNAL_ERROR, 503


# --- what an SDK user hits (mma2a.sdk) ---------------------------------------------------------


class PayloadExpired(SignatureError):
    """A payload or stream URL whose signed expiry has passed before it was read."""


class DigestMismatch(PayloadError):
    """Bytes whose SHA-256 or size differ from what the part's `payload` reference promised."""


class GatewayUnreachable(MMA2AError):
    """The gateway (or agent) cannot be reached: connection refused, DNS failure, timeout."""

    code, http_status = INTERNAL_ERROR, 503


class ModalityRefused(ContentTypeNotSupported):
    """The receiver (an agent, or the gateway on its behalf) refuses a part's modality (-32005)."""
