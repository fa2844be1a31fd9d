"""bench/assertion_once_cost: what making a peer's assertion good once costs a federated request, in process.

Downstream: `Federation.principal` (the signature checked, then the assertion recorded as used) against the same check
without the record (`_verify` alone: the code before); upstream: `Federation.assertion` (signing, now with a random
nonce in the payload) against the same payload without the nonce. Interleaved rounds in one process; prints the best
of each and the difference. A request without the header pays one attribute look (`client.bound`), not measured.
A listing (session 16): its binding `list_bound` (its params read through the A2A type and digested; paid by the
upstream signing it and the downstream checking it) and `check_listing` for a listing without an assertion.
`--nats`: a clustered gateway also claims each assertion in the cluster's nonce bucket; the claim's time (wall, a
NATS KV create on a nats-server of its own on loopback) and the process's CPU for it, median and mean of `--n` claims.

    PYTHONPATH=src .venv/bin/python bench/assertion_once_cost.py [--rounds 7] [--n 2000] [--nats]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
import timeit

from mma2a.gateway.access.clients import Client
from mma2a.gateway.access.federation import Asserted, Federation, _b64, _ident, check_listing, list_bound
from mma2a.signing import canonicalize, new_private_key


def main(rounds: int, n: int) -> None:
    key = new_private_key()
    up = Federation("gw-a", private_key=key)
    down = Federation("gw-b", peers={"gwa": key.public_key()}, window_s=3600.0)
    peer = Client("gwa", "bearer")
    now = int(time.time())
    best = {k: float("inf") for k in ("verify", "verify+once", "sign", "sign+nonce")}
    for _ in range(rounds):
        headers = [up.assertion("alice", f"message:m-{i}", now) for i in range(n)]
        it = iter(headers)

        def principal_before() -> Client:  # `principal` as it was: the check, then the client it names
            asserted = down._verify(next(it), down.peers["gwa"], "gwa", now)
            return dataclasses.replace(peer, upstream=asserted.client, bound=asserted.bound)

        best["verify"] = min(best["verify"], timeit.timeit(principal_before, number=n) / n * 1e6)
        it = iter(headers)
        best["verify+once"] = min(best["verify+once"], timeit.timeit(
            lambda: down.principal(peer, next(it), now), number=n) / n * 1e6)

        def sign_plain() -> str:  # the payload as before: no nonce
            body = canonicalize({"v": 1, "gateway": "gw-a", "key": up._key, "client": "alice", "for": "message:m",
                                 "ts": now})
            return f"v1.{_b64(body)}.{_b64(key.sign(body))}"

        best["sign"] = min(best["sign"], timeit.timeit(sign_plain, number=n) / n * 1e6)
        best["sign+nonce"] = min(best["sign+nonce"], timeit.timeit(
            lambda: up.assertion("alice", "message:m", now), number=n) / n * 1e6)
    print(f"downstream: verify {best['verify']:.1f} us, verify + recorded once {best['verify+once']:.1f} us "
          f"(+{best['verify+once'] - best['verify']:.2f} us, {best['verify+once'] / best['verify']:.3f}x)")
    import tracemalloc  # what a remembered assertion holds: its digest and its record

    guard = Federation("gw-m", peers={"gwa": key.public_key()}, window_s=3600.0)
    idents = [_ident(h) for h in headers]
    tracemalloc.start()
    for i, ident in enumerate(idents):
        guard._spend(Asserted("gwa", "alice", f"message:m-{i}", ident, now), now)
    held = tracemalloc.get_traced_memory()[0] / n + sys.getsizeof(idents[0])
    tracemalloc.stop()
    print(f"a remembered assertion holds ~{held:.0f} bytes ({n} remembered)")
    print(f"upstream: sign {best['sign']:.1f} us, sign with a nonce {best['sign+nonce']:.1f} us "
          f"(+{best['sign+nonce'] - best['sign']:.2f} us, {best['sign+nonce'] / best['sign']:.3f}x); "
          f"best of {rounds} interleaved rounds of {n}")
    listing = {"contextId": "ctx-0123456789", "pageSize": 100, "pageToken": "WzAsIiJd", "historyLength": 1,
               "includeArtifacts": True}
    bound = min(timeit.timeit(lambda: list_bound(listing), number=n) / n * 1e6 for _ in range(rounds))
    plain = min(timeit.timeit(lambda: check_listing(listing), number=n) / n * 1e6 for _ in range(rounds))
    print(f"a listing: its binding (list_bound, at each side) {bound:.1f} us; check_listing without an assertion "
          f"{plain:.3f} us; best of {rounds} rounds of {n}")


async def claims(n: int) -> None:
    from mma2a.cluster.link import ClusterLink
    from mma2a.cluster.nonces import ClusterNonces
    from mma2a.cluster.server import NatsServer
    from mma2a.gateway.cluster_config import ClusterConfig

    key = new_private_key()
    up = Federation("gw-a", private_key=key)
    with tempfile.TemporaryDirectory() as store:
        server = NatsServer(store).start()
        try:
            link = await ClusterLink(ClusterConfig(nats=server.url, name="bench")).connect()
            nonces = ClusterNonces(link)
            await nonces.setup(60.0)
            down = Federation("gw-b", peers={"gwa": key.public_key()}, ledger=nonces)
            peer = Client("gwa", "bearer", upstream="alice", bound="message:m")
            headers = [up.assertion("alice", f"message:m-{i}", int(time.time())) for i in range(n)]
            walls = []
            cpu0 = time.process_time()
            for value in headers:
                t0 = time.perf_counter()
                await down.claim(peer, value)
                walls.append((time.perf_counter() - t0) * 1e6)
            cpu = (time.process_time() - cpu0) / n * 1e6
            await link.close()
        finally:
            server.stop()
    print(f"cluster claim: {statistics.median(walls):.0f} us median, {statistics.fmean(walls):.0f} us mean (wall, "
          f"one NATS round trip); {cpu:.0f} us of this process's CPU a claim; {n} claims")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--nats", action="store_true", help="also the cluster's claim, on a nats-server of its own")
    args = ap.parse_args()
    main(args.rounds, args.n)
    if args.nats:
        asyncio.run(claims(args.n))
