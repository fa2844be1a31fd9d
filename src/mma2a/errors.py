"""One hierarchy of mma2a errors, each mapped here to an A2A/JSON-RPC code and an HTTP status.

Every layer raises these; the gateway turns them into wire errors in one place
(`MMA2AError.to_jsonrpc`, `MMA2AError.to_rest`), so a user sees the same code and message on
every binding. As A2A 1.0 asks, JSON-RPC `error.data` is an array of typed details led by a
`google.rpc.ErrorInfo` (reason, domain, metadata), the same details the REST binding sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "A2A_DOMAIN",
    "A2A_ERRORS",
    "CONTENT_TYPE_NOT_SUPPORTED",
    "ERROR_INFO_TYPE",
    "EXTENDED_CARD_NOT_CONFIGURED",
    "EXTENSION_SUPPORT_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_AGENT_RESPONSE",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PUSH_NOT_SUPPORTED",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "UNSUPPORTED_OPERATION",
    "VERSION_NOT_SUPPORTED",
    "AgentNotFound",
    "AgentRPCError",
    "AgentStatusError",
    "AgentTooLarge",
    "ClusterError",
    "code_for_reason",
    "ConfigError",
    "ContentTypeNotSupported",
    "DigestMismatch",
    "DispatchError",
    "error_info",
    "error_metadata",
    "ExtensionError",
    "FeatureSchemaError",
    "Forbidden",
    "GatewayUnreachable",
    "grpc_status",
    "InvalidModality",
    "InvalidParams",
    "InvalidRequest",
    "MediaError",
    "metadata_strings",
    "MethodNotFound",
    "MMA2AError",
    "ModalityRefused",
    "Overloaded",
    "ParseError",
    "PushNotSupported",
    "PayloadError",
    "PayloadExpired",
    "PayloadNotFound",
    "PayloadTooLarge",
    "ResolverBusy",
    "RoutingRefusal",
    "InsufficientStorage",
    "StoreQuotaExceeded",
    "ClientQuotaExceeded",
    "TooManyUploads",
    "RangeNotSatisfiable",
    "RateLimited",
    "rest_status",
    "RuleError",
    "SignatureError",
    "status_for_reason",
    "status_of_reason",
    "TaskNotCancelable",
    "TaskNotFound",
    "Unauthorized",
    "UnknownModality",
    "UnsupportedExtensionVersion",
    "UnsupportedOperation",
    "UploadOffsetMismatch",
    "URLForbidden",]

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
EXTENDED_CARD_NOT_CONFIGURED = -32007
VERSION_NOT_SUPPORTED = -32009

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
A2A_DOMAIN = "a2a-protocol.org"

# code -> (ErrorInfo reason, REST HTTP status, gRPC status), as the A2A 1.0 error table maps them
A2A_ERRORS: dict[int, tuple[str, int, str]] = {
    PARSE_ERROR: ("PARSE_ERROR", 400, "INVALID_ARGUMENT"),
    INVALID_REQUEST: ("INVALID_REQUEST", 400, "INVALID_ARGUMENT"),
    METHOD_NOT_FOUND: ("METHOD_NOT_FOUND", 404, "NOT_FOUND"),
    INVALID_PARAMS: ("INVALID_PARAMS", 400, "INVALID_ARGUMENT"),
    INTERNAL_ERROR: ("INTERNAL_ERROR", 500, "INTERNAL"),
    TASK_NOT_FOUND: ("TASK_NOT_FOUND", 404, "NOT_FOUND"),
    TASK_NOT_CANCELABLE: ("TASK_NOT_CANCELABLE", 409, "FAILED_PRECONDITION"),
    PUSH_NOT_SUPPORTED: ("PUSH_NOTIFICATION_NOT_SUPPORTED", 400, "FAILED_PRECONDITION"),
    UNSUPPORTED_OPERATION: ("UNSUPPORTED_OPERATION", 400, "FAILED_PRECONDITION"),
    CONTENT_TYPE_NOT_SUPPORTED: ("CONTENT_TYPE_NOT_SUPPORTED", 415, "INVALID_ARGUMENT"),
    INVALID_AGENT_RESPONSE: ("INVALID_AGENT_RESPONSE", 502, "INTERNAL"),
    EXTENDED_CARD_NOT_CONFIGURED: ("EXTENDED_AGENT_CARD_NOT_CONFIGURED", 400, "FAILED_PRECONDITION"),
    EXTENSION_SUPPORT_REQUIRED: ("EXTENSION_SUPPORT_REQUIRED", 400, "FAILED_PRECONDITION"),
    VERSION_NOT_SUPPORTED: ("VERSION_NOT_SUPPORTED", 400, "FAILED_PRECONDITION"),
}


# statuses some errors answer with beyond the table (authentication, limits, availability)
_GRPC_BY_HTTP = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT",
                 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


_REASON_BY_HTTP = {s: _GRPC_BY_HTTP[s] for s in (401, 403, 429, 503)}

# the HTTP status of each canonical gRPC code (google.rpc.Code's own table): an ErrorInfo reason named after one
# (`PERMISSION_DENIED`, `RESOURCE_EXHAUSTED`, as gateways name their refusals) says how a client should take it
_HTTP_BY_GRPC = {"CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
                 "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 400,
                 "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500, "UNAVAILABLE": 503,
                 "DATA_LOSS": 500, "UNAUTHENTICATED": 401}
_OTHER_REASONS = {"OVERLOADED": (503, "UNAVAILABLE")}  # reasons of ours that name no gRPC code


def status_of_reason(reason: str | None, grpc_code: str | None = None) -> tuple[int, str] | None:
    """How REST and gRPC answer an agent's error whose ErrorInfo `reason` is not its code's (an agent's own, a later
    A2A's, a peer gateway's refusal): the HTTP status and gRPC code the reason names (the A2A table's, a canonical
    gRPC code's, ours), else those of the gRPC code the agent answered with (`grpc_code`); None: nothing names them."""
    for name, status, code in A2A_ERRORS.values():
        if name == reason:
            return status, code
    if reason in _HTTP_BY_GRPC:
        return _HTTP_BY_GRPC[reason], reason
    if reason in _OTHER_REASONS:
        return _OTHER_REASONS[reason]
    if grpc_code is not None and grpc_code in _HTTP_BY_GRPC:
        return _HTTP_BY_GRPC[grpc_code], grpc_code
    return None


def rest_status(code: int) -> int:
    """The HTTP status the REST binding answers an A2A/JSON-RPC error code with."""
    entry = A2A_ERRORS.get(code)
    return entry[1] if entry is not None else 500


def error_info(code: int, metadata: dict[str, Any] | None = None, *, reason: str | None = None) -> dict[str, Any]:
    """The `google.rpc.ErrorInfo` detail for an error code; metadata values become strings, as its schema says."""
    reason = reason or A2A_ERRORS.get(code, ("UNKNOWN_ERROR", 500, "UNKNOWN"))[0]
    return {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": A2A_DOMAIN, "metadata": metadata_strings(metadata)}


def metadata_strings(metadata: dict[str, Any] | None) -> dict[str, str]:
    """ErrorInfo metadata is a map of strings: other values are written as JSON."""
    return {str(k): v if isinstance(v, str) else _json(v) for k, v in (metadata or {}).items()}


def grpc_status(exc: MMA2AError) -> str:
    """The gRPC status code name an error is answered with on the gRPC binding."""
    return (exc.grpc_code or _GRPC_BY_HTTP.get(exc.http_status)
            or A2A_ERRORS.get(exc.code, ("", 500, "INTERNAL"))[2])


def code_for_reason(reason: str) -> int | None:
    """The A2A/JSON-RPC code of an ErrorInfo reason (how a gRPC agent's error is read back)."""
    for code, (name, _, _) in A2A_ERRORS.items():
        if name == reason:
            return code
    return None


def status_for_reason(reason: str) -> int | None:
    """The REST status of an ErrorInfo reason, when the A2A error table names it."""
    for name, status, _ in A2A_ERRORS.values():
        if name == reason:
            return status
    return None


def error_metadata(data: Any) -> dict[str, Any]:
    """The metadata of the first ErrorInfo in a wire `error.data` (array of details, or a legacy object)."""
    if isinstance(data, list):
        for detail in data:
            if isinstance(detail, dict) and detail.get("@type") == ERROR_INFO_TYPE:
                meta = detail.get("metadata")
                return dict(meta) if isinstance(meta, dict) else {}
        return {}
    if isinstance(data, dict):
        return dict(data)
    return {"detail": data} if data is not None else {}


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, default=str).decode()


class MMA2AError(Exception):
    """Base of every error mma2a raises on purpose."""

    code: int = INTERNAL_ERROR
    http_status: int = 500
    grpc_code: str | None = None  # the gRPC status, where the HTTP status and the code do not say it (`grpc_status`)

    def __init__(self, message: str, *, field: str | None = None, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.data = dict(data or {})
        if field is not None:
            self.data.setdefault("field", field)

    def details(self) -> list[dict[str, Any]]:
        """The typed details of this error: one `ErrorInfo` whose metadata is `data` (the reason is the
        code's, or for authentication, permission, rate and availability refusals, the status's)."""
        return [error_info(self.code, self.data, reason=_REASON_BY_HTTP.get(self.http_status))]

    def to_jsonrpc(self) -> dict[str, Any]:
        """The JSON-RPC `error` object for this error (`data`: the typed details, A2A 1.0)."""
        return {"code": self.code, "message": self.message, "data": self.details()}

    def to_rest(self) -> dict[str, Any]:
        """The REST (HTTP+JSON) error body for this error, answered with HTTP status `http_status`."""
        return {"error": {"code": self.http_status, "status": grpc_status(self), "message": self.message,
                          "details": self.details()}}


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


class ConfigError(MMA2AError):
    """The gateway configuration does not validate; the message names the field."""

    http_status = 400


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


class RoutingRefusal(MMA2AError):
    """A refusal of routing whose message may end with a `hint` naming the gateway's agents (which exist, which are
    unhealthy); a caller limited to some agents gets it `without_hint`."""

    def __init__(self, message: str, *, field: str | None = None, data: dict[str, Any] | None = None,
                 hint: str = "") -> None:
        super().__init__(message + hint, field=field, data=data)
        self.hint = hint

    def without_hint(self) -> RoutingRefusal:
        """The same refusal, its message without the hint (itself when it has none)."""
        if not self.hint:
            return self
        return type(self)(self.message[: -len(self.hint)], field=self.field, data=self.data)


class ContentTypeNotSupported(RoutingRefusal):
    """No agent accepts a part natively and no transform chain reaches one that does."""

    code, http_status = CONTENT_TYPE_NOT_SUPPORTED, 415


class AgentNotFound(RoutingRefusal):
    code, http_status = INVALID_PARAMS, 404


class FeatureIncomplete(RoutingRefusal):
    """A rule with `on_incomplete: refuse` could not be judged: the feature it tests was not extracted."""

    code, http_status = INVALID_PARAMS, 400


class TaskNotFound(MMA2AError):
    code, http_status = TASK_NOT_FOUND, 404


class TaskNotCancelable(MMA2AError):
    code, http_status = TASK_NOT_CANCELABLE, 409


class PushNotSupported(MMA2AError):
    code, http_status = PUSH_NOT_SUPPORTED, 400


class UnsupportedOperation(MMA2AError):
    code, http_status = UNSUPPORTED_OPERATION, 400


class DispatchError(MMA2AError):
    """A downstream agent failed, timed out or answered with something that is not A2A.

    `message` is what a client is told: it names the agent, never its address. `detail`, when set, is the whole
    text with the address and low-level cause (`described`): for the operator only (logs, the admin API)."""

    code, http_status = INVALID_AGENT_RESPONSE, 502

    def __init__(self, message: str, *, field: str | None = None, data: dict[str, Any] | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message, field=field, data=data)
        self.detail = detail

    @property
    def described(self) -> str:
        """The failure as the operator reads it: `detail` when there is one, else the message."""
        return self.detail or self.message


class AgentRPCError(MMA2AError):
    """The agent answered with a JSON-RPC error. Passed on unchanged: its code, message and `data` (the
    typed details) as the agent sent them, on REST with the status the A2A error table gives its code — for a code
    the table has no row for, the status its ErrorInfo reason names (`status_of_reason`; `grpc_code`: the gRPC status
    a gRPC agent answered with), never 500 INTERNAL as if the gateway had failed."""

    def __init__(self, agent: str, error: Mapping[str, Any], *, grpc_code: str | None = None) -> None:
        code = error.get("code", -32603)
        msg = str(error.get("message", "agent error"))
        super().__init__(msg, data=error_metadata(error.get("data")))
        self.code = code if isinstance(code, int) and not isinstance(code, bool) else -32603
        self.http_status = rest_status(self.code)
        self.agent = agent
        self.error = {"code": self.code, "message": msg} | ({"data": error["data"]} if "data" in error else {})
        row, reason = A2A_ERRORS.get(self.code), self.reason()
        if row is None or (reason is not None and reason != row[0]):  # a reason its code does not name
            named = status_of_reason(reason, grpc_code)
            # (a refusal for now is told by the agent's HTTP status, AgentRefusal; an agent's 401 is about this
            # gateway's credential, never the client's: those keep their code's status)
            if named is not None and named[0] not in (401, 429, 503):
                self.http_status, self.grpc_code = named
            elif row is None:  # gRPC's code for an error from another address space whose kind is not known
                self.http_status, self.grpc_code = 500, "UNKNOWN"

    def reason(self) -> str | None:
        """The reason of the agent's first ErrorInfo (None: it sent none)."""
        for detail in self.details():
            if str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
                reason = detail.get("reason")
                return reason if isinstance(reason, str) else None
        return None

    def details(self) -> list[dict[str, Any]]:
        data = self.error.get("data")
        if isinstance(data, list) and all(isinstance(d, dict) for d in data):
            return list(data)
        return super().details()

    def to_jsonrpc(self) -> dict[str, Any]:
        return dict(self.error)


class AgentStatusError(AgentRPCError):
    """An agent's error that its HTTP status tells (a refusal for now, a body too large): answered with that status on
    every binding — JSON-RPC too, as the gateway's own refusals at its door are."""


class AgentTooLarge(AgentStatusError):
    """The agent (a peer gateway) answered HTTP 413 with a JSON-RPC error: the request as this gateway passed it on —
    the client's message with this gateway's metadata (`via`, `hops`, extension fields), maybe re-encoded — is over the
    agent's body limit, though the client's was within this gateway's. Answered 413 naming the agent, the bytes sent
    and the agent's own words (its limit); the agent's ErrorInfo kept, with `agent` and `sentBytes` added."""

    def __init__(self, agent: str, error: Mapping[str, Any], sent: int) -> None:
        theirs = str(error.get("message", "request body too large"))
        data = error.get("data")
        extra = {"agent": agent, "sentBytes": str(sent)}
        if isinstance(data, list) and any(isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE for d in data):
            first = next(i for i, d in enumerate(data) if isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE)
            info = dict(data[first])
            theirs_meta = info.get("metadata")
            info["metadata"] = {**(theirs_meta if isinstance(theirs_meta, dict) else {}), **extra}
            data = [*data[:first], info, *data[first + 1:]]
        else:
            data = [error_info(INVALID_REQUEST, extra)]
        message = (f"the request as passed on to agent {agent} ({sent} bytes: the message with this gateway's routing "
                   f"metadata) is over that agent's body limit: {theirs}")
        super().__init__(agent, {"code": error.get("code", INVALID_REQUEST), "message": message, "data": data})
        self.http_status = 413
        self.grpc_code = None  # as the gateway's own 413 (INVALID_ARGUMENT)


class AgentRefusal(AgentStatusError):
    """The agent refused the call for now — HTTP 429 or 503 with a JSON-RPC error, as a peer gateway refuses a client
    past its rate or sheds a message: passed on as the refusal it is, the agent's code, message and details with its
    HTTP status and a `Retry-After` (the `retryAfter` of its ErrorInfo, else `retry_after` — a gRPC agent's
    `retry-after` — else 1 s), on every binding as the gateway's own refusals (through a federation hop the client is
    told as one gateway tells it). A gRPC agent's `RESOURCE_EXHAUSTED` with an ErrorInfo is its 429."""

    def __init__(self, agent: str, error: Mapping[str, Any], status: int, *, retry_after: str | None = None) -> None:
        super().__init__(agent, error)
        self.http_status = status
        self.grpc_code = None  # its status says it (429: RESOURCE_EXHAUSTED, 503: UNAVAILABLE)
        wait = self.data.get("retryAfter", retry_after)  # its ErrorInfo's, else the wait its answer said besides
        try:
            self.retry_after = max(0.0, float(wait)) if wait is not None else 1.0
        except (TypeError, ValueError):
            self.retry_after = 1.0


class PayloadError(MMA2AError):
    """A blob or stream could not be stored, read or verified."""

    code, http_status = INVALID_PARAMS, 400


class PayloadNotFound(PayloadError):
    code, http_status = INVALID_PARAMS, 404


class RangeNotSatisfiable(PayloadError):
    """A byte range or stream offset outside what is stored or still buffered."""

    http_status = 416


class InsufficientStorage(PayloadError):
    """The blob store's disk is down to its reserve (`blob_min_free_bytes`): nothing more is written."""

    http_status = 507


class StoreQuotaExceeded(InsufficientStorage):
    """The blob store would hold more than `blob_max_bytes`: nothing more is written until blobs are deleted."""


class ClientQuotaExceeded(PayloadError):
    """A client's blobs and uploads would hold more than `blob_max_bytes_per_client`: 413, the client must delete
    some of its blobs (or send less); waiting does not help, so not 429."""

    http_status = 413


class TooManyUploads(PayloadError):
    """A client would hold more resumable uploads open at once than `blob_max_uploads_per_client`: 429, as for its
    response streams (`limits.max_response_streams_per_client`); it must finish or abort one first (an abandoned one
    ends by itself once idle for a day). No `Retry-After`: waiting alone does not help."""

    http_status = 429


class UploadOffsetMismatch(PayloadError):
    """A resumable upload chunk sent at an offset other than the upload's current end."""

    http_status = 409


class SignatureError(PayloadError):
    """A signed URL or extension signature that is tampered with, expired or for another method."""

    http_status = 403


class URLForbidden(PayloadError):
    """The gateway refuses to fetch this URL (SSRF guard)."""

    http_status = 403


class ResolverBusy(MMA2AError):
    """Too many host-name lookups of the SSRF guard in flight (`payload.ssrf.MAX_LOOKUPS`): retry."""

    code, http_status = INTERNAL_ERROR, 503


class Unauthorized(MMA2AError):
    code, http_status = INVALID_REQUEST, 401


class Forbidden(MMA2AError):
    code, http_status = INVALID_REQUEST, 403


class PayloadTooLarge(MMA2AError):
    code, http_status = INVALID_REQUEST, 413


class UnsupportedContentCoding(InvalidRequest):
    """A request body in a `Content-Encoding` this process does not read: 415 with `Accept-Encoding` naming the
    codings it reads (RFC 9110 15.5.16, RFC 7694), so a sender (an upstream gateway too) sends it again plain."""

    http_status = 415


class RequestTimeout(MMA2AError):
    """The request did not arrive whole in time (HTTP 408; gRPC DEADLINE_EXCEEDED)."""

    code, http_status = INVALID_REQUEST, 408


class RateLimited(MMA2AError):
    code, http_status = INVALID_REQUEST, 429

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message, data={"retryAfter": retry_after})
        self.retry_after = retry_after


class Overloaded(MMA2AError):
    """A leg shed because its agent is at its concurrency limit and the leg cannot wait for a slot (its queue is
    full, it would wait past its deadline, or a more urgent leg took its place): HTTP 503 with `Retry-After`, gRPC
    UNAVAILABLE with RetryInfo; the ErrorInfo reason is `OVERLOADED` and its metadata names the agent."""

    code, http_status = INTERNAL_ERROR, 503
    REASON = "OVERLOADED"

    def __init__(self, message: str, *, agent: str, priority: int, why: str, retry_after: float) -> None:
        super().__init__(message, data={"agent": agent, "priority": priority, "shed": why,
                                        "retryAfter": round(retry_after, 3)})
        self.agent = agent
        self.priority = priority
        self.why = why
        self.retry_after = retry_after

    def details(self) -> list[dict[str, Any]]:
        return [error_info(self.code, self.data, reason=self.REASON)]


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
