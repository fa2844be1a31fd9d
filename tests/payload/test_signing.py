"""URLSigner: round trip, and every way a URL can be wrong gets its own 403 message."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.errors import PayloadError, SignatureError
from mma2a.payload import URLSigner

from tests.payload.support import SECRET, Clock

KEY = "ab" * 32


def query(url: str) -> tuple[str, str]:
    q = parse_qs(urlsplit(url).query)
    return q["exp"][0], q["sig"][0]


def test_sign_and_verify() -> None:
    clock = Clock()
    signer = URLSigner(SECRET, clock=clock)
    url = signer.sign(KEY, "GET", 60)
    assert url.startswith(f"/blobs/{KEY}?exp={int(clock.now) + 60}&sig=")
    exp, sig = query(url)
    assert signer.verify("GET", KEY, exp, sig) == int(clock.now) + 60
    assert signer.verify("HEAD", KEY, exp, sig) == int(clock.now) + 60  # HEAD reads like GET


def test_tampered_expired_wrong_method() -> None:
    clock = Clock()
    signer = URLSigner(SECRET, clock=clock)
    exp, sig = query(signer.sign(KEY, "GET", 60))
    cases = [
        (("GET", KEY, exp, sig[:-1] + ("A" if sig[-1] != "A" else "B")), f"blobs/{KEY}: signature does not match (URL tampered with)"),
        (("GET", "cd" * 32, exp, sig), f"blobs/{'cd' * 32}: signature does not match (URL tampered with)"),
        (("GET", KEY, str(int(exp) + 3600), sig), f"blobs/{KEY}: signature does not match (URL tampered with)"),
        (("DELETE", KEY, exp, sig), f"blobs/{KEY}: URL is signed for GET, not DELETE"),
        (("GET", KEY, None, sig), f"blobs/{KEY}: URL is not signed (exp and sig are required)"),
        (("GET", KEY, exp, ""), f"blobs/{KEY}: URL is not signed (exp and sig are required)"),
        (("GET", KEY, "soon", sig), f"blobs/{KEY}: exp 'soon' is not a Unix time"),
    ]
    for args, message in cases:
        with pytest.raises(SignatureError) as exc:
            signer.verify(*args)
        assert (exc.value.message, exc.value.http_status) == (message, 403)
    # a stream signature is not a blob signature
    with pytest.raises(SignatureError):
        signer.verify("GET", KEY, exp, sig, scope="streams")
    clock.now += 61
    with pytest.raises(SignatureError) as exc:
        signer.verify("GET", KEY, exp, sig)
    assert exc.value.message == f"blobs/{KEY}: signed URL expired 1 s ago"


def test_other_secret_does_not_verify() -> None:
    exp, sig = query(URLSigner(SECRET).sign(KEY))
    with pytest.raises(SignatureError):
        URLSigner(b"another-secret-of-16+bytes").verify("GET", KEY, exp, sig)


def test_bad_configuration() -> None:
    with pytest.raises(PayloadError) as exc:
        URLSigner(b"short")
    assert exc.value.message == "URL signing secret must be at least 16 bytes"
    with pytest.raises(PayloadError) as exc:
        URLSigner(SECRET).sign(KEY, expires_in=0)
    assert exc.value.message == "expires_in must be 1..604800 seconds, got 0"


@settings(max_examples=200, deadline=None)
@given(
    key=st.text("0123456789abcdef", min_size=64, max_size=64),
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    ttl=st.integers(1, 7 * 24 * 3600),
    flip=st.integers(0, 42),
)
def test_property_only_the_signed_url_verifies(key: str, method: str, ttl: int, flip: int) -> None:
    signer = URLSigner(SECRET, clock=Clock())
    exp, sig = query(signer.sign(key, method, ttl))
    assert signer.verify(method, key, exp, sig) == int(exp)
    i = flip % len(sig)
    tampered = sig[:i] + ("x" if sig[i] != "x" else "y") + sig[i + 1 :]
    with pytest.raises(SignatureError):
        signer.verify(method, key, exp, tampered)
    with pytest.raises(SignatureError):
        signer.verify(method, key, str(int(exp) + 1), sig)
