"""Blob endpoints under a real uvicorn server: streamed upload, ranged reads, signatures, keys, resumable uploads."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.payload.conftest import PayloadServer

MB = 1 << 20


def make_file(path: Path, size: int) -> str:
    """A real file of random bytes; returns its SHA-256."""
    h = hashlib.sha256()
    with path.open("wb") as fh:
        left = size
        while left:
            block = os.urandom(min(MB, left))
            fh.write(block)
            h.update(block)
            left -= len(block)
    return h.hexdigest()


async def stream_file(path: Path, chunk: int = MB) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            yield block


def read_slice(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(start)
        return fh.read(end - start)


def signed(url: str) -> tuple[str, str, str]:
    parts = urlsplit(url)
    q = parse_qs(parts.query)
    return parts.path, q["exp"][0], q["sig"][0]


async def test_50mb_upload_streamed_and_read_back_by_range(server: PayloadServer, tmp_path: Path) -> None:
    src = tmp_path / "video.mp4"
    size = 50 * MB
    digest = make_file(src, size)
    async with httpx.AsyncClient(timeout=60) as client:
        r = await client.post(
            f"{server.url}/blobs",
            content=stream_file(src),
            headers={"Content-Type": "video/mp4", "X-Content-SHA256": digest},
        )
        assert r.status_code == 201, r.text
        body = r.json()
        assert (body["sha256"], body["size"], body["mediaType"]) == (digest, size, "video/mp4")
        assert body["url"].startswith(f"{server.url}/blobs/{digest}?exp=")
        assert r.headers["location"] == body["url"]

        for header, start, end in [
            ("bytes=0-1048575", 0, MB),
            ("bytes=26214400-27262975", 25 * MB, 26 * MB),
            ("bytes=-1000", size - 1000, size),
            (f"bytes={size - 10}-", size - 10, size),
            ("bytes=52428700-99999999", 52428700, size),
        ]:
            rr = await client.get(body["url"], headers={"Range": header})
            assert rr.status_code == 206, (header, rr.text)
            assert rr.headers["content-range"] == f"bytes {start}-{end - 1}/{size}"
            assert rr.headers["content-type"] == "video/mp4"
            assert rr.content == read_slice(src, start, end)

        h = hashlib.sha256()
        async with client.stream("GET", body["url"]) as full:
            assert full.status_code == 200
            assert full.headers["content-length"] == str(size)
            assert full.headers["accept-ranges"] == "bytes"
            async for chunk in full.aiter_bytes():
                h.update(chunk)
        assert h.hexdigest() == digest

        head = await client.head(body["url"])
        assert (head.status_code, head.headers["content-length"], head.content) == (200, str(size), b"")


async def test_bad_signatures_get_403(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        body = (await client.post(f"{server.url}/blobs", content=b"payload bytes", headers={"Content-Type": "text/plain"})).json()
        key = body["sha256"]
        path, exp, sig = signed(body["url"])
        assert (await client.get(body["url"])).content == b"payload bytes"

        tampered_sig = sig[:-2] + ("AA" if not sig.endswith("AA") else "BB")
        other_key = hashlib.sha256(b"other").hexdigest()
        cases = [
            (f"{server.url}{path}?exp={exp}&sig={tampered_sig}", "GET", f"blobs/{key}: signature does not match (URL tampered with)"),
            (f"{server.url}{path}?exp={int(exp) + 86400}&sig={sig}", "GET", f"blobs/{key}: signature does not match (URL tampered with)"),
            (f"{server.url}/blobs/{other_key}?exp={exp}&sig={sig}", "GET", f"blobs/{other_key}: signature does not match (URL tampered with)"),
            (f"{server.url}{path}", "GET", f"blobs/{key}: URL is not signed (exp and sig are required)"),
            (body["url"], "DELETE", f"blobs/{key}: URL is signed for GET, not DELETE"),
        ]
        for url, method, message in cases:
            r = await client.request(method, url)
            assert r.status_code == 403, (url, r.text)
            assert r.json() == {"error": {"code": -32602, "reason": "signature_error", "message": message, "data": {"field": r.json()["error"]["data"]["field"]}}}

        server.clock.now += 3601
        r = await client.get(body["url"])
        assert r.status_code == 403
        assert r.json()["error"]["message"] == f"blobs/{key}: signed URL expired 1 s ago"

        server.clock.now -= 3601
        delete_url = f"{server.url}{server.signer.sign(key, 'DELETE')}"
        assert (await client.delete(delete_url)).status_code == 204
        r = await client.get(body["url"])
        assert (r.status_code, r.json()["error"]["message"]) == (404, f"blob {key} not found")


@pytest.mark.parametrize(
    ("raw_path", "key"),
    [
        ("/blobs/..%2F..%2F..%2Fetc%2Fpasswd", "../../../etc/passwd"),
        ("/blobs/%2e%2e/%2e%2e/etc/passwd", "../../etc/passwd"),
        ("/blobs/..%5Cwindows", "..\\windows"),
        ("/blobs/" + "A" * 64, "A" * 64),
        ("/blobs/uploads", "uploads"),
    ],
)
async def test_path_traversal_key_gets_400(server: PayloadServer, raw_path: str, key: str) -> None:
    exp, sig = server.signer.sign_query(key)
    async with httpx.AsyncClient() as client:
        r = await client.get(httpx.URL(server.url).copy_with(raw_path=f"{raw_path}?exp={exp}&sig={sig}".encode()))
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {
        "code": -32602,
        "reason": "payload_error",
        "message": f"blob key {key!r} is not a SHA-256 hex digest (64 lower-case hex digits)",
        "data": {"field": "key"},
    }


async def test_range_errors_get_416(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        body = (await client.post(f"{server.url}/blobs", content=b"0123456789")).json()
        assert body["mediaType"] == "application/octet-stream"
        for header, message in [
            ("bytes=10-", "Range 'bytes=10-' is not satisfiable for a blob of 10 bytes"),
            ("bytes=5-2", "Range 'bytes=5-2' is not satisfiable for a blob of 10 bytes"),
            ("bytes=0-1,4-5", "Range 'bytes=0-1,4-5': multiple ranges are not supported"),
            ("pages=1-2", "Range 'pages=1-2': expected bytes=START-END"),
            ("bytes=-0", "Range 'bytes=-0': empty suffix range"),
        ]:
            r = await client.get(body["url"], headers={"Range": header})
            assert r.status_code == 416, header
            assert r.headers["content-range"] == "bytes */10"
            assert r.json()["error"]["message"] == message
        r = await client.get(body["url"], headers={"Range": "bytes=2-4"})
        assert (r.status_code, r.content) == (206, b"234")


async def test_upload_errors(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{server.url}/blobs", content=b"abc", headers={"X-Content-SHA256": "0" * 64})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            f"sha256 mismatch: the body hashes to {hashlib.sha256(b'abc').hexdigest()}, the client said {'0' * 64}"
        )
        r = await client.post(f"{server.url}/blobs", content=b"abc", headers={"Content-Type": "not a type"})
        assert r.status_code == 400
        assert r.json()["error"]["reason"] == "invalid_modality"
        assert r.json()["error"]["message"].startswith("Content-Type: ")
        r = await client.post(f"{server.url}/blobs", content=b"x" * (64 * MB + 1))
        assert r.status_code == 413
        assert r.json()["error"]["message"] == f"body of {64 * MB + 1} bytes is larger than the limit of {64 * MB} bytes"
    assert list((server.store.root / "tmp").iterdir()) == []


async def test_resumable_upload_over_http(server: PayloadServer, tmp_path: Path) -> None:
    src = tmp_path / "audio.ogg"
    size = 3 * MB + 12345
    digest = make_file(src, size)
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{server.url}/blobs/uploads", json={"mediaType": "audio/ogg; codecs=opus"})
        assert r.status_code == 201, r.text
        up = r.json()
        assert (up["offset"], up["mediaType"]) == (0, "audio/ogg; codecs=opus")
        loc = up["location"]
        assert loc == f"{server.url}/blobs/uploads/{up['uploadId']}"

        first = read_slice(src, 0, 2 * MB)
        r = await client.patch(loc, content=first, headers={"Upload-Offset": "0"})
        assert (r.status_code, r.json()["offset"], r.headers["upload-offset"]) == (200, 2 * MB, str(2 * MB))

        r = await client.patch(loc, content=b"again", headers={"Upload-Offset": "0"})
        assert r.status_code == 409
        assert r.json()["error"] == {
            "code": -32602,
            "reason": "upload_offset_mismatch",
            "message": f"upload {up['uploadId']}: chunk sent at offset 0, expected offset {2 * MB}",
            "data": {"field": "Upload-Offset", "expectedOffset": 2 * MB},
        }
        r = await client.patch(loc, content=b"x")
        assert (r.status_code, r.json()["error"]["message"]) == (400, "Upload-Offset header is required")
        r = await client.patch(loc, content=b"x", headers={"Upload-Offset": "-1"})
        assert (r.status_code, r.json()["error"]["message"]) == (400, "Upload-Offset '-1' is not a non-negative integer")

        head = await client.head(loc)
        assert head.headers["upload-offset"] == str(2 * MB)

        # resume from the offset the server reported, streaming the rest of the file from disk
        async def rest() -> AsyncIterator[bytes]:
            with src.open("rb") as fh:
                fh.seek(int(head.headers["upload-offset"]))
                while block := fh.read(256 * 1024):
                    yield block

        r = await client.patch(loc, content=rest(), headers={"Upload-Offset": head.headers["upload-offset"]})
        assert r.json()["offset"] == size

        r = await client.post(f"{loc}/finish", headers={"X-Content-SHA256": digest})
        assert r.status_code == 201, r.text
        blob = r.json()
        assert (blob["sha256"], blob["size"], blob["mediaType"]) == (digest, size, "audio/ogg; codecs=opus")
        got = await client.get(blob["url"], headers={"Range": f"bytes={size - 100}-"})
        assert got.content == read_slice(src, size - 100, size)

        r = await client.get(loc)
        assert (r.status_code, r.json()["error"]["message"]) == (404, f"upload {up['uploadId']} not found")
        r = await client.patch(f"{server.url}/blobs/uploads/nothex", content=b"x", headers={"Upload-Offset": "0"})
        assert (r.status_code, r.json()["error"]["message"]) == (400, "upload id 'nothex' is not valid (use the uploadId POST /blobs/uploads answered)")

        r = await client.post(f"{server.url}/blobs/uploads", headers={"Content-Type": "image/png"})
        uid = r.json()["uploadId"]
        assert r.json()["mediaType"] == "image/png"
        assert (await client.delete(f"{server.url}/blobs/uploads/{uid}")).status_code == 204
        assert (await client.head(f"{server.url}/blobs/uploads/{uid}")).status_code == 404
