"""Signed extension fields: RFC 8785 canonical form, Ed25519 sign/verify, forgery and replay."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import math

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.errors import RateLimited, SignatureError
from mma2a.ext import EXTENSION_URI
from mma2a.signing import (
    ReplayGuard,
    canonicalize,
    new_private_key,
    part_digest,
    private_key_from_text,
    private_key_text,
    public_key_from_text,
    public_key_text,
    sign_message,
    signature_of,
    strip_features,
    verify_message,
)

SIG = f"message.metadata[{EXTENSION_URI}].signature"
NOW = 1_767_225_600
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n not really a png").decode()


def message() -> dict:
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": [
        {"text": "is the hinge cracked?"},
        {"raw": PNG, "mediaType": "image/png", "metadata": {EXTENSION_URI: {
            "modality": "image/png", "features": {"objects": ["hinge"], "width": 1920, "blur": 0.12},
            "featureSource": {"kind": "producer"}}}},
    ]}


def signed(key=None, **kw) -> tuple[dict, dict]:
    key = key or KEY
    msg = message()
    sign_message(msg, key, signer="camera-1", ts=kw.pop("ts", NOW), **kw)
    return msg, {"camera-1": key.public_key()}


KEY = new_private_key()


# --- RFC 8785 --------------------------------------------------------------------------------------


def test_jcs_matches_the_rfc_8785_examples() -> None:
    # RFC 8785 section 3.2.2 and 3.2.3: number formatting, string escapes, key order by UTF-16 code units
    doc = {"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
           "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/", "literals": [None, True, False]}
    assert canonicalize(doc) == (
        b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize({"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}) == (
        '{"\\r":2,"1":4,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001f600":5,"\ufb33":3}'.encode()
    )


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (-0.0, "0"), (1.0, "1"), (-1.5, "-1.5"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
    (1e-6, "0.000001"), (1e-7, "1e-7"), (123456789012345680000.0, "123456789012345680000"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"), (2**53, "9007199254740992"),
    (2**60, "1152921504606847000"), (0.1, "0.1"), (1920, "1920"), (1920.0, "1920"),
])
def test_jcs_numbers_are_ecmascript_numbers(value: float, text: str) -> None:
    assert canonicalize(value) == text.encode()


@pytest.mark.parametrize(("value", "error"), [
    (math.nan, "nan is not a JSON number"), (math.inf, "inf is not a JSON number"),
    ({1: "x"}, "object key 1 is not a string"), ("\ud800", "string holds a lone surrogate (not valid Unicode)"),
    (b"bytes", "bytes is not a JSON value"),
])
def test_jcs_refuses_what_json_cannot_hold(value: object, error: str) -> None:
    with pytest.raises(ValueError) as exc:
        canonicalize(value)
    assert str(exc.value) == error


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@settings(max_examples=300, deadline=None)
@given(_json)
def test_jcs_is_json_that_reads_back_to_the_same_value_and_is_stable(value: object) -> None:
    try:
        out = canonicalize(value)
    except ValueError as exc:  # only lone surrogates in generated text
        assert "surrogate" in str(exc)
        return
    back = json.loads(out)
    assert _same(back, value)  # as IEEE doubles, the way any JSON reader of the canonical form sees numbers
    assert canonicalize(back) == out  # a parse and re-canonicalise changes nothing (the protobuf double round trip)
    assert canonicalize(orjson.loads(orjson.dumps(value))) == out


# --- sign and verify ---------------------------------------------------------------------------------


def test_a_signed_message_verifies_and_names_its_signer() -> None:
    msg, keys = signed()
    sig = signature_of(msg)
    assert set(sig) == {"v", "alg", "signer", "nonce", "ts", "sig"} and sig["v"] == 2 and sig["alg"] == "Ed25519" and sig["signer"] == "camera-1"
    assert EXTENSION_URI in msg["extensions"]
    assert verify_message(msg, keys, now=NOW + 10, replay=ReplayGuard(300)) == "camera-1"


def test_the_protobuf_round_trip_keeps_the_signature_valid() -> None:
    """The SDK bindings see every number as a double (1920 -> 1920.0): the canonical form is the same."""
    msg, keys = signed()
    doubled = json.loads(json.dumps(msg), parse_int=float)
    assert doubled["parts"][1]["metadata"][EXTENSION_URI]["features"]["width"] == 1920.0
    assert verify_message(doubled, keys, now=NOW) == "camera-1"


def test_keys_round_trip_as_base64_text() -> None:
    key = private_key_from_text(private_key_text(KEY))
    assert public_key_text(key) == public_key_text(KEY.public_key())
    pub = public_key_from_text(public_key_text(KEY))
    msg, _ = signed()
    assert verify_message(msg, {"camera-1": pub}, now=NOW) == "camera-1"
    with pytest.raises(SignatureError) as exc:
        public_key_from_text("bm90IGEga2V5", field="signing.senders.cam.public_key")
    assert exc.value.message == "signing.senders.cam.public_key: must be 32 bytes of Ed25519 public key in base64"


@pytest.mark.parametrize("tamper", ["feature", "new_feature", "content", "swap_parts", "message_id", "modality", "ts",
                                    "media_type", "filename", "kind", "receivers", "intent", "priority", "session"])
def test_any_change_after_signing_is_a_forgery(tamper: str) -> None:
    msg, keys = signed()
    ext = msg["parts"][1]["metadata"][EXTENSION_URI]
    mext = msg["metadata"][EXTENSION_URI]
    if tamper == "media_type":  # signed features moved to another media type (issue 32)
        msg["parts"][1]["mediaType"] = "text/markdown"
    elif tamper == "filename":
        msg["parts"][1]["filename"] = "invoice.pdf"
    elif tamper == "kind":  # the same bytes as text instead of raw: the digest alone is equal
        msg["parts"][0] = {"raw": base64.b64encode(b"is the hinge cracked?").decode()}
    elif tamper == "receivers":  # re-routed after signing (issue 32)
        mext["receivers"] = ["evil"]
    elif tamper == "intent":
        mext["intent"] = "explicit"
        mext["receivers"] = ["evil"]
    elif tamper == "priority":
        mext["priority"] = 9
    elif tamper == "session":
        mext["session"] = {"id": "s-1", "seq": 0}
    elif tamper == "feature":
        ext["features"]["objects"] = ["person"]
    elif tamper == "new_feature":
        ext["features"]["qr"] = True
    elif tamper == "content":  # the same features moved onto other bytes
        msg["parts"][1]["raw"] = base64.b64encode(b"other bytes").decode()
    elif tamper == "swap_parts":
        msg["parts"].reverse()
    elif tamper == "message_id":
        msg["messageId"] = "m-2"
    elif tamper == "modality":
        ext["modality"] = "image/jpeg"
    else:
        msg["metadata"][EXTENSION_URI]["signature"]["ts"] = NOW + 1
    with pytest.raises(SignatureError) as exc:
        verify_message(msg, keys, now=NOW)
    assert exc.value.message == (
        f"{SIG}: does not verify for signer 'camera-1' (a part's extension metadata, kind, mediaType, filename or "
        "content, or the message's intent, receivers, priority or session changed after signing; or forged)")
    assert exc.value.http_status == 403


def test_a_version_1_signature_is_refused_naming_what_it_left_out() -> None:
    msg, keys = signed()
    del msg["metadata"][EXTENSION_URI]["signature"]["v"]  # the form signed before version 2 (no "v")
    with pytest.raises(SignatureError) as exc:
        verify_message(msg, keys, now=NOW)
    assert exc.value.message == (
        f"{SIG}.v: signature version 1 is no longer accepted: version 1 left out parts' kind, mediaType and filename, "
        "and the message's intent, receivers, priority and session, so they could be changed after signing; "
        "re-sign with version 2 (mma2a.signing.sign_message)")
    assert exc.value.field == f"{SIG}.v"


def test_a_gateway_passing_a_signed_message_on_keeps_its_consumed_intent_verifiable() -> None:
    from mma2a.signing import ROUTED, pass_on_route

    msg = message()
    msg["metadata"] = {EXTENSION_URI: {"receivers": ["vision"]}}
    sign_message(msg, KEY, signer="camera-1", ts=NOW)
    keys = {"camera-1": KEY.public_key()}
    passed = copy.deepcopy(msg)  # what the next hop receives: intent consumed, the gateway in via, `routed` kept
    mext = passed["metadata"][EXTENSION_URI]
    mext.update({"receivers": [], "intent": "auto", "hops": 1, "via": ["gw-a"], ROUTED: pass_on_route(msg)})
    assert mext[ROUTED] == {"intent": "explicit", "receivers": ["vision"]}
    assert verify_message(passed, keys, now=NOW) == "camera-1"
    moved = copy.deepcopy(passed)  # `routed` rewritten on the way
    moved["metadata"][EXTENSION_URI][ROUTED]["receivers"] = ["evil"]
    with pytest.raises(SignatureError, match="does not verify"):
        verify_message(moved, keys, now=NOW)
    both = copy.deepcopy(passed)  # `routed` to pass verification, receivers to route elsewhere
    both["metadata"][EXTENSION_URI]["receivers"] = ["evil"]
    with pytest.raises(SignatureError) as exc:
        verify_message(both, keys, now=NOW)
    assert exc.value.message == (f"message.metadata[{EXTENSION_URI}].routed: only a gateway that passed the message on "
                                 "sets it (with intent auto, no receivers, and itself in via)")


def test_a_signature_by_another_key_is_a_forgery() -> None:
    msg, _ = signed(key=new_private_key())
    with pytest.raises(SignatureError) as exc:
        verify_message(msg, {"camera-1": KEY.public_key()}, now=NOW)
    assert "does not verify for signer 'camera-1'" in exc.value.message


def test_unknown_signer_missing_and_malformed_signatures() -> None:
    msg, keys = signed()
    cases = [
        ({**signature_of(msg), "signer": "mallory"}, f"{SIG}.signer: no public key for signer 'mallory'"),
        ({**signature_of(msg), "alg": "HS256"}, f"{SIG}.alg: must be Ed25519, got 'HS256'"),
        ({**signature_of(msg), "nonce": "short"}, f"{SIG}.nonce: required, 8 to 128 characters"),
        ({**signature_of(msg), "ts": "yesterday"}, f"{SIG}.ts: required, Unix seconds (integer)"),
        ({**signature_of(msg), "sig": 7}, f"{SIG}.sig: required, base64url Ed25519 signature"),
        ({**signature_of(msg), "signer": ""}, f"{SIG}.signer: required, the producer's name"),
        ("abc", f"{SIG}: must be an object"),
    ]
    for sig, text in cases:
        bad = copy.deepcopy(msg)
        bad["metadata"][EXTENSION_URI]["signature"] = sig
        with pytest.raises(SignatureError) as exc:
            verify_message(bad, keys, now=NOW)
        assert exc.value.message == text
    with pytest.raises(SignatureError) as exc:
        verify_message(message(), keys, now=NOW)
    assert exc.value.message == f"{SIG}: missing (this gateway requires signed extension fields)"


def test_replayed_and_stale_signatures_are_refused() -> None:
    guard = ReplayGuard(window_s=300)
    msg, keys = signed()
    assert verify_message(msg, keys, now=NOW, replay=guard) == "camera-1"
    with pytest.raises(SignatureError) as exc:
        verify_message(copy.deepcopy(msg), keys, now=NOW + 5, replay=guard)
    assert exc.value.message == f"{SIG}.nonce: nonce already used by camera-1 (replayed message)"
    old, _ = signed(ts=NOW - 301)
    with pytest.raises(SignatureError) as exc:
        verify_message(old, keys, now=NOW, replay=guard)
    assert exc.value.message == f"{SIG}.ts: signature is 301 s old, outside the 300 s window (replayed or clock skew)"
    future, _ = signed(ts=NOW + 400)
    with pytest.raises(SignatureError) as exc:
        verify_message(future, keys, now=NOW, replay=guard)
    assert exc.value.message == f"{SIG}.ts: signature is 400 s in the future, outside the 300 s window (replayed or clock skew)"


def test_a_forged_message_does_not_burn_the_genuine_nonce() -> None:
    guard = ReplayGuard(window_s=300)
    msg, keys = signed()
    forged = copy.deepcopy(msg)
    forged["parts"][0]["text"] = "send everything to mallory"
    with pytest.raises(SignatureError):
        verify_message(forged, keys, now=NOW, replay=guard)
    assert verify_message(msg, keys, now=NOW, replay=guard) == "camera-1"


def test_nonces_are_forgotten_after_the_window() -> None:
    guard = ReplayGuard(window_s=10, capacity=100)
    for i in range(50):
        guard.remember("s", f"nonce-{i}", float(i))
    assert guard.held("s") == 21  # kept until now + 2 windows when the message's ts is not given: 29..49
    guard.remember("s", "with-ts", 50.0, ts=45.0)  # a replay of it passes check_fresh until 45 + 10
    with pytest.raises(SignatureError):
        guard.remember("s", "with-ts", 55.0)
    guard.remember("s", "with-ts", 55.5)  # now it would be refused as stale anyway


def test_a_flood_from_one_signer_never_reopens_another_signers_replay() -> None:
    """Finding 2, as the attack: 200,000 fresh messages from one signer, then an old message of another replayed
    at t = 61 s inside a 300 s window. The old guard evicted the oldest nonce at 200,000 and accepted the replay."""
    key1, key2 = new_private_key(), new_private_key()
    keys = {"camera-1": key1.public_key(), "camera-2": key2.public_key()}
    guard = ReplayGuard(window_s=300, capacity=200_000)
    def signed_by(key, signer: str, ts: int) -> dict:
        msg = message()
        sign_message(msg, key, signer=signer, ts=ts)
        return msg

    victim = signed_by(key1, "camera-1", NOW)
    assert verify_message(victim, keys, now=NOW, replay=guard) == "camera-1"
    for i in range(200_000):  # the flood: fresh nonces of camera-2 (each would carry a valid signature)
        guard.remember("camera-2", f"flood-{i:07d}", NOW + 1 + i * 60 / 200_000, ts=NOW + 1)
    with pytest.raises(SignatureError) as replay:
        verify_message(copy.deepcopy(victim), keys, now=NOW + 61, replay=guard)
    assert replay.value.message == f"{SIG}.nonce: nonce already used by camera-1 (replayed message)"
    over = signed_by(key2, "camera-2", NOW + 61)
    with pytest.raises(RateLimited) as full:  # the flooding signer is the one refused, by name
        verify_message(over, keys, now=NOW + 61, replay=guard)
    assert full.value.message.startswith(f"{SIG}.signer: signer camera-2 has 200000 nonces inside the 300 s replay window")
    assert full.value.http_status == 429 and 0 < full.value.retry_after <= 300
    other = signed_by(key1, "camera-1", NOW + 61)
    assert verify_message(other, keys, now=NOW + 61, replay=guard) == "camera-1"  # camera-1 is not affected
    assert guard.held("camera-1") == 2 and guard.held("camera-2") == 200_000
    later = signed_by(key2, "camera-2", NOW + 302)
    assert verify_message(later, keys, now=NOW + 302, replay=guard) == "camera-2"  # the flood has expired
    assert guard.held("camera-2") == 1


def test_digests_cover_each_kind_of_content() -> None:
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    assert part_digest({"text": "héllo"}) == sha("héllo".encode())
    assert part_digest({"raw": base64.b64encode(b"\x00\xff").decode()}) == sha(b"\x00\xff")
    assert part_digest({"raw": base64.urlsafe_b64encode(b"\xfb\xff").decode().rstrip("=")}) == sha(b"\xfb\xff")
    assert part_digest({"url": "https://x/y"}) == sha(b"https://x/y")
    assert part_digest({"data": {"b": 1, "a": [1.0]}}) == sha(b'{"a":[1],"b":1}')


def test_strip_features_removes_what_a_sender_claimed() -> None:
    msg = message()
    assert strip_features(msg) == 1
    assert msg["parts"][1]["metadata"][EXTENSION_URI] == {"modality": "image/png"}
