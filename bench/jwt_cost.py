"""bench/jwt_cost: what authenticating one request costs with a JWT against a static bearer token.

The gateway's own `Authenticator` (auth on, ten static clients, one JWT issuer whose JWKS is a file read once:
the key is cached), called as a request calls it, with the headers a request carries. Arms, interleaved in each
round, each timed call by call (`perf_counter_ns`), the median per round:

- `static`: a static client's bearer token (SHA-256 digest, compared in constant time with each client's);
- `jwt-cached`: one client's JWT again and again (verified once, then found by its digest until it expires);
- `jwt-rs256`, `jwt-es256`: a new token every call (the signature, header and claims checked in full each time,
  with the issuer's key from the cached set): what the first request of each token costs;
- `rs256-sig`, `es256-sig`: the signature check alone (`cryptography`'s verify of the same tokens): the floor the
  full check cannot go under.

Reports the median of the round medians (µs) and each arm's ratio to `static`, with the machine's load:

    PYTHONPATH=src .venv/bin/python bench/jwt_cost.py --rounds 5 --n 2000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mma2a.gateway.access.clients import AuthConfig, Authenticator
from mma2a.gateway.access.jwt_clients import JWTVerifier

ISSUER, AUDIENCE = "https://idp.bench/realms/acme", "mma2a"
NOW = 1_900_000_000


def _mint(key: Any, alg: str, sub: str) -> str:
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": NOW, "exp": NOW + 3600, "groups": ["staff"],
              "scope": "openid profile", "azp": "bench-client"}
    return jwt.encode({"alg": alg, "kid": key.kid, "typ": "JWT"}, claims, key)


def build(n: int, directory: Path) -> tuple[dict[str, Authenticator], dict[str, list[dict[str, str]]],
                                           dict[str, list[Callable[[], None]]]]:
    rsa = RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "use": "sig", "alg": "RS256"})
    ec = ECKey.generate_key("P-256", parameters={"kid": "ec-1", "use": "sig", "alg": "ES256"})
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [rsa.as_dict(private=False), ec.as_dict(private=False)]}))
    clients = [{"name": f"client-{i}", "token": f"tok-bench-{i:02d}-9f3c1a7e"} for i in range(10)]
    issuer = {"issuer": ISSUER, "audiences": [AUDIENCE], "jwks_file": str(jwks), "algorithms": ["RS256", "ES256"]}
    config = AuthConfig.model_validate({"clients": clients, "jwt": [issuer]})
    auths = {}
    for arm, entries in (("cached", 4096), ("full", 0)):  # `full`: no verified-token cache, every call verifies
        verifier = JWTVerifier(config.jwt, clock=lambda: float(NOW + 60), cache_entries=entries)
        errors = asyncio.run(verifier.start())
        assert not errors, errors
        auths[arm] = Authenticator(config, verifier)
    one = _mint(rsa, "RS256", "alice")
    headers = {
        "static": [{"authorization": "Bearer tok-bench-07-9f3c1a7e"}] * n,
        "jwt-cached": [{"authorization": f"Bearer {one}"}] * n,
        "jwt-rs256": [{"authorization": f"Bearer {_mint(rsa, 'RS256', f'user-{i}')}"} for i in range(n)],
        "jwt-es256": [{"authorization": f"Bearer {_mint(ec, 'ES256', f'user-{i}')}"} for i in range(n)],
    }
    sigs = {"rs256-sig": [signature_only(h["authorization"][7:], rsa) for h in headers["jwt-rs256"]],
            "es256-sig": [signature_only(h["authorization"][7:], ec) for h in headers["jwt-es256"]]}
    return auths, headers, sigs


def signature_only(token: str, key: Any) -> Callable[[], None]:
    """The bare signature check of `token` with `key` (what OpenSSL costs, nothing of JOSE or the claims)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

    head, payload, sig = token.split(".")
    data, raw = f"{head}.{payload}".encode(), base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    public = key.public_key
    if isinstance(key, RSAKey):
        return lambda: public.verify(raw, data, padding.PKCS1v15(), hashes.SHA256())
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    return lambda: public.verify(der, data, ec.ECDSA(hashes.SHA256()))


def run_calls(calls: list[Callable[[], None]]) -> float:
    clock = time.perf_counter_ns
    times = []
    for call in calls:
        t0 = clock()
        call()
        times.append(clock() - t0)
    return statistics.median(times) / 1000


def run(auth: Authenticator, requests: list[dict[str, str]]) -> float:
    clock = time.perf_counter_ns
    times = []
    for headers in requests:
        t0 = clock()
        auth.authenticate(headers)
        times.append(clock() - t0)
    return statistics.median(times) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="requests per arm per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        auths, headers, sigs = build(args.n, Path(tmp))
    arms = {"static": auths["cached"], "jwt-cached": auths["cached"], "jwt-rs256": auths["full"],
            "jwt-es256": auths["full"]}
    for arm, auth in arms.items():  # warm up: the cached arm's token is verified here
        run(auth, headers[arm][:50])
    rounds: dict[str, list[float]] = {arm: [] for arm in [*arms, *sigs]}
    for _ in range(args.rounds):
        for arm, auth in arms.items():
            rounds[arm].append(run(auth, headers[arm]))
        for arm, calls in sigs.items():
            rounds[arm].append(run_calls(calls))
    medians = {arm: statistics.median(v) for arm, v in rounds.items()}
    out = {"us": medians, "ratio_to_static": {a: m / medians["static"] for a, m in medians.items()},
           "rounds": rounds, "load": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(out))
        return
    print(f"load average {out['load']:.1f}; {args.rounds} rounds x {args.n} requests per arm, median of round medians")
    print(f"{'arm':<12} {'µs/request':>10} {'x static':>9}   rounds")
    for arm, m in medians.items():
        spread = ", ".join(f"{v:.1f}" for v in rounds[arm])
        print(f"{arm:<12} {m:>10.1f} {m / medians['static']:>9.1f}   {spread}")


if __name__ == "__main__":
    main()
