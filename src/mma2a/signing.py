"""Signed extension fields: Ed25519 over the canonical form of each part's extension metadata and payload digest.

A producer signs what the router reads: every part's `metadata[EXTENSION_URI]`, its kind
(text, raw, url, data), `mediaType` and `filename`, a SHA-256 digest of its content (so
features cannot be moved onto other bytes), and the message's routing fields (`intent`,
`receivers`, `priority`, `session`); the gateway verifies before routing. The signed object is serialised with RFC 8785 (JSON
Canonicalization Scheme) so any JSON library, and the protobuf round trip the SDK does
(every number a double), gives the same bytes. The signature travels detached in
`message.metadata[EXTENSION_URI].signature`:

    {"v": 2, "alg": "Ed25519", "signer": "camera-1", "nonce": "<random>", "ts": 1767225600, "sig": "<base64url>"}

A gateway that passes a signed message on consumes its routing intent (the next hop routes
automatically) and keeps what the producer signed in `routed` ({intent, receivers}); the
next hop verifies against that. `hops` and `via` change at every gateway and are not signed.

`ts` and `nonce` bound replays: a signature older or newer than the window is refused,
and a nonce seen inside the window is refused (`ReplayGuard`). Pure: no clock reads, no I/O.
See docs/extension.md section "Signed extension fields" and docs/security.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import math
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import RateLimited, SignatureError
from .ext import EXTENSION_URI, part_kind

if TYPE_CHECKING:  # cryptography is imported where a key is made or a signature checked (a plain gateway has none)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG = "Ed25519"
SIGNED_VERSION = 2
_FIELD = f"message.metadata[{EXTENSION_URI}].signature"
_EXT_FIELD = f"message.metadata[{EXTENSION_URI}]"
ROUTED = "routed"
"""The message-level key where a gateway that passed a signed message on keeps the routing intent it consumed."""
V1_LEFT_OUT = "parts' kind, mediaType and filename, and the message's intent, receivers, priority and session"
"""What a version 1 signature did not cover (named when one is refused)."""


# --- RFC 8785 canonical JSON ------------------------------------------------------------------


def _number(value: float) -> str:
    """ECMAScript Number.prototype.toString of a finite double (what RFC 8785 prescribes)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp = repr(abs(value)).partition("e")
    int_part, _, frac = mantissa.partition(".")
    digits = int_part + frac
    point = len(int_part) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    s = stripped.rstrip("0") or "0"
    k, n = len(s), point
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + s
    else:
        e = n - 1
        exp_s = ("+" if e >= 0 else "-") + str(abs(e))
        out = (s if k == 1 else s[0] + "." + s[1:]) + "e" + exp_s
    return sign + out


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            raise ValueError("string holds a lone surrogate (not valid Unicode)")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _write(value: Any, out: list[str], depth: int) -> None:
    if depth > 64:
        raise ValueError("nested deeper than 64 levels")
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value) if abs(value) < 2**53 else _number(float(value)))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        out.append(_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        keys = sorted(value, key=lambda k: k.encode("utf-16-be") if isinstance(k, str) else b"")
        for i, key in enumerate(keys):
            if not isinstance(key, str):
                raise ValueError(f"object key {key!r} is not a string")
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out, depth + 1)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    else:
        raise ValueError(f"{type(value).__name__} is not a JSON value")


def canonicalize(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value; `ValueError` for what JSON cannot hold."""
    out: list[str] = []
    _write(value, out, 0)
    return "".join(out).encode("utf-8")


# --- what is signed -----------------------------------------------------------------------------


def part_digest(part: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a part's content: text as UTF-8, raw as its decoded bytes, url as the URL, data as JCS."""
    if isinstance(part.get("text"), str):
        blob = part["text"].encode("utf-8", errors="surrogatepass")
    elif isinstance(part.get("raw"), str):
        text = part["raw"]
        try:
            blob = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_" if ("-" in text or "_" in text) else None)
        except (binascii.Error, ValueError):
            blob = text.encode("utf-8", errors="surrogatepass")
    elif isinstance(part.get("url"), str):
        blob = part["url"].encode("utf-8", errors="surrogatepass")
    elif "data" in part:
        try:
            blob = canonicalize(part["data"])
        except ValueError:
            blob = b""
    else:
        blob = b""
    return hashlib.sha256(blob).hexdigest()


def message_extension(message: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = message.get("metadata")
    mext = meta.get(EXTENSION_URI) if isinstance(meta, Mapping) else None
    return mext if isinstance(mext, Mapping) else {}


def signed_route(mext: Mapping[str, Any]) -> dict[str, Any]:
    """The message's routing fields as signed, defaults filled in (a gateway writes them all when it passes the
    message on): `intent`, `receivers`, `priority`, `session` — with intent and receivers from `routed` when a
    gateway upstream consumed them."""
    routed = mext.get(ROUTED)
    source: Mapping[str, Any] = routed if isinstance(routed, Mapping) else mext
    receivers = source.get("receivers", [])
    return {"intent": source.get("intent", "explicit" if receivers else "auto"), "receivers": receivers,
            "priority": mext.get("priority", 5), "session": mext.get("session")}


def signed_object(message: Mapping[str, Any], *, signer: str, nonce: str, ts: int) -> dict[str, Any]:
    """The object whose canonical form is signed (docs/extension.md, "Signed extension fields")."""
    parts: list[dict[str, Any]] = []
    for part in message.get("parts") or []:
        if not isinstance(part, Mapping):
            parts.append({"ext": None, "kind": None, "mediaType": None, "filename": None,
                          "sha256": hashlib.sha256(b"").hexdigest()})
            continue
        meta = part.get("metadata")
        ext = meta.get(EXTENSION_URI) if isinstance(meta, Mapping) else None
        parts.append({"ext": ext, "kind": part_kind(part), "mediaType": part.get("mediaType"),
                      "filename": part.get("filename"), "sha256": part_digest(part)})
    return {"v": SIGNED_VERSION, "alg": ALG, "signer": signer, "nonce": nonce, "ts": ts,
            "messageId": message.get("messageId"), "route": signed_route(message_extension(message)), "parts": parts}


def signing_input(message: Mapping[str, Any], *, signer: str, nonce: str, ts: int) -> bytes:
    try:
        return canonicalize(signed_object(message, signer=signer, nonce=nonce, ts=ts))
    except ValueError as exc:
        raise SignatureError(f"{_FIELD}: the extension metadata cannot be canonicalised: {exc}", field=_FIELD) from None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- keys ---------------------------------------------------------------------------------------


def new_private_key() -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


def private_key_from_text(text: str) -> Ed25519PrivateKey:
    """A private key from its 32 raw bytes in base64 (standard or URL-safe)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        return Ed25519PrivateKey.from_private_bytes(_unb64(text.strip().replace("+", "-").replace("/", "_")))
    except (ValueError, binascii.Error):
        raise SignatureError("private key: must be 32 bytes of Ed25519 key in base64", field="private_key") from None


def public_key_from_text(text: str, *, field: str = "public_key") -> Ed25519PublicKey:
    """A public key from its 32 raw bytes in base64 (standard or URL-safe)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(_unb64(text.strip().replace("+", "-").replace("/", "_")))
    except (ValueError, binascii.Error):
        raise SignatureError(f"{field}: must be 32 bytes of Ed25519 public key in base64", field=field) from None


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return base64.b64encode(pub.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode("ascii")


def private_key_text(key: Ed25519PrivateKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    return base64.b64encode(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())).decode("ascii")


# --- producers: sign ----------------------------------------------------------------------------


def sign_message(
    message: dict[str, Any], key: Ed25519PrivateKey, *, signer: str, ts: int, nonce: str | None = None
) -> dict[str, Any]:
    """Sign `message` (A2A 1.0 JSON form) in place as `signer` at Unix time `ts`; returns the signature object.

    Sign last: any later change to a part's extension metadata, kind, media type, file name or content, or to
    the message's routing fields, breaks the signature.
    """
    nonce = nonce or secrets.token_urlsafe(16)
    sig = key.sign(signing_input(message, signer=signer, nonce=nonce, ts=ts))
    signature = {"v": SIGNED_VERSION, "alg": ALG, "signer": signer, "nonce": nonce, "ts": ts, "sig": _b64url(sig)}
    meta = message.setdefault("metadata", {})
    mext = meta.setdefault(EXTENSION_URI, {})
    mext.setdefault("protocol", "a2a-multimodal/1.0")
    mext["signature"] = signature
    exts = message.setdefault("extensions", [])
    if EXTENSION_URI not in exts:
        exts.append(EXTENSION_URI)
    return signature


# --- the gateway: verify ------------------------------------------------------------------------


def signature_of(message: Mapping[str, Any]) -> Any:
    """The detached signature object a message carries, or None."""
    meta = message.get("metadata")
    mext = meta.get(EXTENSION_URI) if isinstance(meta, Mapping) else None
    return mext.get("signature") if isinstance(mext, Mapping) else None


class ReplayGuard:
    """Nonces seen inside the freshness window, kept per signer until their message can no longer be fresh.

    A nonce is never forgotten while a replay of its message would still pass `check_fresh`
    (until `ts + window_s`). Each signer has its own `capacity`: a signer that has that many
    live nonces gets its new messages refused (`RateLimited`, naming the signer) until the
    oldest expire — one signer's flood never drops another signer's protection. Memory is
    bounded by (known signers) × `capacity`, since only verified signers are recorded.
    """

    def __init__(self, window_s: float = 300.0, capacity: int = 100_000) -> None:
        self.window_s = window_s
        self.capacity = capacity
        self._seen: dict[str, dict[str, float]] = {}  # signer -> nonce -> expiry
        self._expiries: dict[str, list[tuple[float, str]]] = {}  # signer -> heap of (expiry, nonce)

    def check_fresh(self, ts: float, now: float) -> None:
        if abs(now - ts) > self.window_s:
            age = now - ts
            when = f"{age:.0f} s old" if age > 0 else f"{-age:.0f} s in the future"
            raise SignatureError(
                f"{_FIELD}.ts: signature is {when}, outside the {self.window_s:g} s window (replayed or clock skew)",
                field=f"{_FIELD}.ts",
            )

    def held(self, signer: str) -> int:
        """How many nonces of `signer` are remembered now."""
        return len(self._seen.get(signer, ()))

    def holds(self, signer: str, nonce: str, now: float) -> bool:
        """`nonce` of `signer` was recorded and may still be replayed (`remember` would refuse it)."""
        expiry = self._seen.get(signer, {}).get(nonce)
        return expiry is not None and expiry >= now

    def forget(self, signer: str, nonce: str) -> None:
        """Drop a nonce recorded for a message that was not accepted after all (the cluster's record was out of
        reach): its retry is not a replay. Its heap entry stays until it expires (harmless)."""
        self._seen.get(signer, {}).pop(nonce, None)

    def remember(self, signer: str, nonce: str, now: float, ts: float | None = None) -> None:
        """Record a nonce; a nonce already seen inside the window is a replay (`SignatureError`).

        `ts` (the message's own time) sets when the nonce may be forgotten: `ts + window_s`,
        after which `check_fresh` refuses the message anyway; without it, `now + 2 * window_s`.
        """
        seen = self._seen.setdefault(signer, {})
        heap = self._expiries.setdefault(signer, [])
        while heap and heap[0][0] < now:  # forget only what can no longer be replayed
            _, old = heapq.heappop(heap)
            seen.pop(old, None)
        if nonce in seen:
            raise SignatureError(f"{_FIELD}.nonce: nonce already used by {signer} (replayed message)", field=f"{_FIELD}.nonce")
        if len(seen) >= self.capacity:
            wait = max(0.0, heap[0][0] - now) if heap else self.window_s
            raise RateLimited(
                f"{_FIELD}.signer: signer {signer} has {len(seen)} nonces inside the {self.window_s:g} s replay window "
                f"(its capacity, signing.max_nonces_per_signer); its new messages are refused for {wait:.0f} s",
                retry_after=round(wait, 3),
            )
        expiry = (ts if ts is not None else now + self.window_s) + self.window_s
        seen[nonce] = expiry
        heapq.heappush(heap, (expiry, nonce))


def verify_message(
    message: Mapping[str, Any], keys: Mapping[str, Ed25519PublicKey], *, now: float, replay: ReplayGuard | None = None
) -> str:
    """Check the message's signature; returns the signer. `SignatureError` naming the field otherwise.

    Order: shape, known signer, freshness, signature, then the nonce (so a forged message
    cannot burn a genuine nonce).
    """
    sig = signature_of(message)
    if sig is None:
        raise SignatureError(f"{_FIELD}: missing (this gateway requires signed extension fields)", field=_FIELD)
    if not isinstance(sig, Mapping):
        raise SignatureError(f"{_FIELD}: must be an object", field=_FIELD)
    version = sig.get("v", 1)
    if version != SIGNED_VERSION:
        raise SignatureError(
            f"{_FIELD}.v: signature version {version!r} is no longer accepted: version 1 left out {V1_LEFT_OUT}, "
            f"so they could be changed after signing; re-sign with version {SIGNED_VERSION} (mma2a.signing.sign_message)",
            field=f"{_FIELD}.v")
    if sig.get("alg") != ALG:
        raise SignatureError(f"{_FIELD}.alg: must be {ALG}, got {sig.get('alg')!r}", field=f"{_FIELD}.alg")
    signer, nonce, ts, value = sig.get("signer"), sig.get("nonce"), sig.get("ts"), sig.get("sig")
    if not isinstance(signer, str) or not signer:
        raise SignatureError(f"{_FIELD}.signer: required, the producer's name", field=f"{_FIELD}.signer")
    if not isinstance(nonce, str) or not 8 <= len(nonce) <= 128:
        raise SignatureError(f"{_FIELD}.nonce: required, 8 to 128 characters", field=f"{_FIELD}.nonce")
    if isinstance(ts, float) and ts.is_integer():
        ts = int(ts)
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise SignatureError(f"{_FIELD}.ts: required, Unix seconds (integer)", field=f"{_FIELD}.ts")
    if not isinstance(value, str):
        raise SignatureError(f"{_FIELD}.sig: required, base64url Ed25519 signature", field=f"{_FIELD}.sig")
    key = keys.get(signer)
    if key is None:
        raise SignatureError(f"{_FIELD}.signer: no public key for signer {signer!r}", field=f"{_FIELD}.signer")
    check_routed(message)
    if replay is not None:
        replay.check_fresh(ts, now)
    try:
        raw = _unb64(value)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{_FIELD}.sig: not base64url", field=f"{_FIELD}.sig") from None
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(raw, signing_input(message, signer=signer, nonce=nonce, ts=ts))
    except InvalidSignature:
        raise SignatureError(
            f"{_FIELD}: does not verify for signer {signer!r} (a part's extension metadata, kind, mediaType, filename "
            "or content, or the message's intent, receivers, priority or session changed after signing; or forged)",
            field=_FIELD,
        ) from None
    if replay is not None:
        replay.remember(signer, nonce, now, ts)
    return signer


def check_routed(message: Mapping[str, Any]) -> None:
    """`routed` stands for the routing intent only where a gateway consumed it: with the message's own intent
    `auto`, no receivers, and the gateways it passed listed in `via`."""
    mext = message_extension(message)
    routed = mext.get(ROUTED)
    if routed is None:
        return
    where = f"{_EXT_FIELD}.{ROUTED}"
    if not isinstance(routed, Mapping):
        raise SignatureError(f"{where}: must be an object", field=where)
    if mext.get("receivers") or mext.get("intent", "auto") != "auto" or not mext.get("via"):
        raise SignatureError(f"{where}: only a gateway that passed the message on sets it (with intent auto, no "
                             "receivers, and itself in via)", field=where)


def pass_on_route(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a gateway that consumes a signed message's routing intent keeps in `routed` (None: not signed)."""
    mext = message_extension(message)
    if not isinstance(mext.get("signature"), Mapping):
        return None
    route = signed_route(mext)
    return {"intent": route["intent"], "receivers": route["receivers"]}


def strip_features(message: dict[str, Any]) -> int:
    """Remove producer features (and their source and schema) from every part; returns how many parts had some."""
    n = 0
    for part in message.get("parts") or []:
        meta = part.get("metadata") if isinstance(part, dict) else None
        ext = meta.get(EXTENSION_URI) if isinstance(meta, dict) else None
        if isinstance(ext, dict) and ({"features", "featureSource", "featureSchema"} & ext.keys()):
            if ext.get("features"):
                n += 1
            for k in ("features", "featureSource", "featureSchema"):
                ext.pop(k, None)
    return n


def carries_features(message: Mapping[str, Any]) -> bool:
    for part in message.get("parts") or []:
        meta = part.get("metadata") if isinstance(part, Mapping) else None
        ext = meta.get(EXTENSION_URI) if isinstance(meta, Mapping) else None
        if isinstance(ext, Mapping) and ext.get("features"):
            return True
    return False
