"""Content codings: round trips, bounded decoding, Accept-Encoding negotiation."""

from __future__ import annotations

import gzip

import pytest

from mma2a.compression import accepted, codings, decode, encode, pick
from mma2a.errors import InvalidRequest, PayloadTooLarge

BODY = b'{"parts": [' + b'{"text": "hello"},' * 2000 + b'{}]}'


@pytest.mark.parametrize("coding", codings())
def test_round_trip_and_smaller(coding):
    packed = encode(BODY, coding)
    assert len(packed) < len(BODY) // 10
    assert decode(packed, coding, len(BODY)) == BODY


@pytest.mark.parametrize("coding", codings())
def test_a_bomb_stops_at_the_limit(coding):
    bomb = encode(b"\0" * (16 * 1024 * 1024), coding)
    with pytest.raises(PayloadTooLarge) as err:
        decode(bomb, coding, 1024 * 1024)
    assert "decodes to more than 1048576 bytes" in err.value.message


def test_corrupt_truncated_and_unknown_codings_are_refused_by_name():
    with pytest.raises(InvalidRequest, match="not valid gzip data"):
        decode(b"plainly not gzip", "gzip", 1024)
    with pytest.raises(InvalidRequest, match="truncated gzip data"):
        decode(gzip.compress(BODY)[:50], "gzip", len(BODY))
    with pytest.raises(InvalidRequest, match="'br' is not supported") as err:
        decode(b"x", "br", 1024)
    assert err.value.field == "Content-Encoding"
    if "zstd" in codings():
        with pytest.raises(InvalidRequest, match="not valid zstd data"):
            decode(b"plainly not zstd", "zstd", 1024)


def test_accept_encoding_negotiation():
    best = codings()[0]
    assert accepted("gzip, deflate, br, zstd") == best
    assert accepted("gzip;q=0.5, zstd;q=0") == "gzip"
    assert accepted("identity") is None and accepted("br") is None
    assert accepted("gzip;q=1.0, zstd;q=0.9") == "gzip"
    assert pick(["br", "gzip"]) == "gzip" and pick([]) is None


@pytest.mark.parametrize("coding", codings())
def test_decoding_in_slices_gives_the_same_bytes_and_errors(coding):
    import asyncio
    import os

    from mma2a.compression import SLICE, decode_yielding

    body = os.urandom(SLICE // 3) + b"\0" * (3 * SLICE) + BODY  # pieces that do and do not compress
    packed = encode(body, coding)
    assert asyncio.run(decode_yielding(packed, coding, len(body))) == decode(packed, coding, len(body)) == body
    assert asyncio.run(decode_yielding(encode(BODY, coding), coding, len(BODY))) == BODY
    with pytest.raises(PayloadTooLarge, match="decodes to more than"):
        asyncio.run(decode_yielding(packed, coding, len(body) - 1))
    if coding == "gzip":  # (zstd's reader gives what a cut frame holds: a prefix, which the JSON layer refuses)
        with pytest.raises(InvalidRequest, match="truncated gzip data"):
            asyncio.run(decode_yielding(packed[: len(packed) // 2], coding, len(body)))
