"""bench/failed_credentials: what the budget of failed credentials per address (`auth.failed_credentials`) costs
the access decision of a request that carries a good credential, and what refusing a guess costs.

The gateway's own `AccessControl.admit` (auth on, ten static clients), called as a request calls it. Arms,
interleaved in each round, timed over `--n` calls each, the best of the round:

- `off`: `failed_credentials.enabled: false` (the gateway before session 14);
- `on`: the budget on, no address has failed yet (the usual case: no bucket to look at);
- `on-bucket`: some other address has a bucket (each request looks its own address up);
- `guess-refused`: a wrong token from an address whose budget is spent (checked, then answered 429).

Reports the median of the rounds (µs per call) and each arm's ratio to `off`, with the machine's load:

    PYTHONPATH=src .venv/bin/python bench/failed_credentials.py --rounds 5 --n 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from mma2a.errors import MMA2AError
from mma2a.gateway.access.authz import AccessClass, ErrorShape, RouteAccess
from mma2a.gateway.access.clients import Authenticator, AuthConfig, FailedCredentialsConfig
from mma2a.gateway.access.failures import CredentialFailures
from mma2a.gateway.access.security import AccessControl

CLIENTS = [{"name": f"client-{i}", "token": f"token-{i}-{'x' * 32}"} for i in range(10)]
GOOD = {"authorization": f"Bearer {CLIENTS[3]['token']}"}
WRONG = {"authorization": "Bearer guess-0000"}
ACCESS = RouteAccess(AccessClass.CLIENT, ErrorShape.JSONRPC)


def _control(failures: bool) -> AccessControl:
    return AccessControl(auth=Authenticator(AuthConfig(clients=CLIENTS)), limiter=None, max_body_bytes=1 << 20,
                         failures=CredentialFailures(FailedCredentialsConfig(per_s=0.001)) if failures else None)


def _arms() -> dict[str, Callable[[], object]]:
    off, on, bucket, spent = _control(False), _control(True), _control(True), _control(True)
    assert bucket.failures is not None and spent.failures is not None
    bucket.failures.failed("10.9.9.9", bucket.clock())
    for _ in range(spent.failures.burst):  # the whole budget (1,000 by default since session 14; the bench took 100)
        spent.failures.failed("10.7.7.7", spent.clock())

    def refused() -> None:
        try:
            spent.admit(ACCESS, WRONG, peer="10.7.7.7")
        except MMA2AError as exc:
            assert exc.http_status == 429
        else:
            raise AssertionError("not refused")

    return {"off": lambda: off.admit(ACCESS, GOOD, peer="127.0.0.1"),
            "on": lambda: on.admit(ACCESS, GOOD, peer="127.0.0.1"),
            "on-bucket": lambda: bucket.admit(ACCESS, GOOD, peer="127.0.0.1"),
            "guess-refused": refused}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    arms = _arms()
    rounds: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, call in arms.items():
            t0 = time.perf_counter()
            for _ in range(args.n):
                call()
            rounds[name].append((time.perf_counter() - t0) / args.n * 1e6)
    base = statistics.median(rounds["off"])
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds x {args.n} calls")
    for name, us in rounds.items():
        med = statistics.median(us)
        print(f"{name:14s} {med:6.2f} us per call  x{med / base:.2f}")


if __name__ == "__main__":
    main()
