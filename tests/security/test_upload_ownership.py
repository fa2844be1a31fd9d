"""An upload belongs to the client that began it (round 4): another client that learns its id can neither read
its offset, append to it, finish nor abort it; the id is answered exactly as one nobody began (404)."""

from __future__ import annotations

import hashlib

import httpx

from tests.security.conftest import API_KEY, TOKEN, secured


async def test_another_clients_upload_id_is_an_upload_nobody_began(monkeypatch):
    monkeypatch.setenv("TEST_BOB_KEY", API_KEY)
    alice, bob = {"Authorization": f"Bearer {TOKEN}"}, {"X-API-Key": API_KEY}
    async with secured() as (gw, url, _), httpx.AsyncClient(timeout=30) as c:
        begun = (await c.post(url + "/blobs/uploads", headers=alice | {"Content-Type": "text/plain"})).json()
        uid, where = begun["uploadId"], f"{url}/blobs/uploads/{begun['uploadId']}"
        assert (await c.patch(where, content=b"alice:", headers=alice | {"Upload-Offset": "0"})).json()["offset"] == 6
        tries = {
            "status": await c.get(where, headers=bob),
            "head": await c.head(where, headers=bob),
            "append": await c.patch(where, content=b"bob was here", headers=bob | {"Upload-Offset": "6"}),
            "finish": await c.post(where + "/finish", headers=bob),
            "abort": await c.delete(where, headers=bob),
        }
        bare = uid.split(".")[0]  # the store's own id, without the tag: not an upload id at all
        bare_try = await c.patch(f"{url}/blobs/uploads/{bare}", content=b"x", headers=bob | {"Upload-Offset": "6"})
        forged = f"{bare}.{'A' * 22}"
        forged_try = await c.get(f"{url}/blobs/uploads/{forged}", headers=bob)
        # alice's upload is untouched: her offset, her bytes
        assert (await c.get(where, headers=alice)).json() == {"uploadId": uid, "offset": 6}
        assert (await c.patch(where, content=b"done", headers=alice | {"Upload-Offset": "6"})).json()["offset"] == 10
        done = await c.post(where + "/finish", headers=alice)
        got = await c.get(done.json()["url"])
    for name, r in tries.items():
        assert r.status_code == 404, name
        if name != "head":
            assert r.json()["error"]["message"] == f"upload {uid} not found", name
    assert (bare_try.status_code, bare_try.json()["error"]["message"]) == (
        400, f"upload id {bare!r} is not valid (use the uploadId POST /blobs/uploads answered)")
    assert (forged_try.status_code, forged_try.json()["error"]["message"]) == (404, f"upload {forged} not found")
    assert done.status_code == 201 and done.json()["sha256"] == hashlib.sha256(b"alice:done").hexdigest()
    assert got.content == b"alice:done"
