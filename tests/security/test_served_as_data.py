"""Blobs are served as data, never as documents of the gateway's origin (security round 4, finding 3): no sniffing,
a sandbox, and a download for every type a browser would render or run; a stored blob's media type is the one it
was first stored with (a re-upload of the same bytes as `text/html` by another client never changes it)."""

from __future__ import annotations

import httpx
import pytest

from tests.security.conftest import API_KEY, TOKEN, secured

SCRIPT = b"<html><body><script>fetch('/admin/rules?t='+sessionStorage.getItem('mma2a-admin'))</script></body></html>"
RENDERED = ["text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml",
            "text/javascript", "application/javascript", "application/pdf", "text/css", "application/octet-stream",
            "text/html; charset=utf-8"]


async def test_every_rendered_or_run_type_is_served_as_a_sandboxed_download(monkeypatch):
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    alice = {"Authorization": f"Bearer {TOKEN}"}
    async with secured() as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        served = {}
        for i, media in enumerate(RENDERED):
            up = await c.post(url + "/blobs", content=SCRIPT + str(i).encode(), headers=alice | {"Content-Type": media})
            assert up.status_code == 201, up.text
            served[media] = await c.get(up.json()["url"])
        inline = await c.post(url + "/blobs", content=b"just text", headers=alice | {"Content-Type": "text/plain"})
        plain = await c.get(inline.json()["url"])
        head = await c.head(inline.json()["url"])
    for media, r in served.items():
        assert r.status_code == 200, media
        assert r.headers["x-content-type-options"] == "nosniff", media
        assert r.headers["content-security-policy"] == "sandbox", media
        assert r.headers["content-disposition"] == "attachment", media
    assert plain.headers["x-content-type-options"] == "nosniff"
    assert plain.headers["content-security-policy"] == "sandbox"
    assert "content-disposition" not in plain.headers  # inert: shown inline, still sandboxed and never sniffed
    assert head.headers["content-security-policy"] == "sandbox"


async def test_a_reupload_as_html_keeps_the_first_media_type(monkeypatch):
    """bob re-uploads alice's bytes as text/html: both get alice's URL's type (image/png), never text/html."""
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    alice, bob = {"Authorization": f"Bearer {TOKEN}"}, {"X-API-Key": API_KEY}
    body = b"not really a picture, but typed as one " + SCRIPT
    async with secured() as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        first = await c.post(url + "/blobs", content=body, headers=alice | {"Content-Type": "text/plain"})
        again = await c.post(url + "/blobs", content=body, headers=bob | {"Content-Type": "text/html"})
        chunked = (await c.post(url + "/blobs/uploads", headers=bob | {"Content-Type": "image/svg+xml"})).json()
        await c.patch(chunked["location"], content=body, headers=bob | {"Upload-Offset": "0"})
        finished = await c.post(chunked["location"] + "/finish", headers=bob)
        hers = await c.get(first.json()["url"])
    assert first.status_code == again.status_code == finished.status_code == 201
    assert first.json()["sha256"] == again.json()["sha256"] == finished.json()["sha256"]
    assert again.json()["mediaType"] == finished.json()["mediaType"] == "text/plain"  # the first type, said back
    assert hers.headers["content-type"].startswith("text/plain") and hers.content == body


@pytest.mark.parametrize("media", ["text/html", "image/svg+xml"])
async def test_a_stream_read_raw_is_served_as_data(media, monkeypatch):
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    alice = {"Authorization": f"Bearer {TOKEN}"}
    async with secured() as (_, url, _), httpx.AsyncClient(timeout=30) as c:
        opened = await c.post(url + "/streams", json={"mediaType": media}, headers=alice)
        assert opened.status_code == 201, opened.text
        info = opened.json()
        assert (await c.post(info["producerUrl"], content=SCRIPT, headers=alice)).status_code < 300
        async with c.stream("GET", info["consumerUrl"] + "&format=raw") as r:
            headers = r.headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "sandbox"
    assert headers["content-disposition"] == "attachment"
