"""Silent TLS connections against a running `mma2a serve` (security round 4 #7).

Starts a gateway with `tls:` and `grpc_listen` (a self-signed certificate made here), opens N TCP connections to
the HTTPS port (and N/4 to the gRPC port) that never send a byte, and reports how long the gateway took to close
them (against `server.header_timeout_s`), and the gateway's RSS before, at the peak and after they closed.

    python bench/tls_handshakes.py --connections 2000 --header-timeout 10

Before the fix the handshake was held to asyncio's 60 s default: 100 such connections stayed open 60 s+ against a
10 s deadline, and 2,000 took the gateway +100 MB that stayed after they closed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port, stop  # noqa: E402
from mma2a.serving import TRIM_EVERY_S  # noqa: E402

PY = sys.executable


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def self_signed(directory: Path) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "gw.pem", directory / "gw.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


async def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise RuntimeError(f"port {port} did not open")


async def silent(port: int, n: int) -> list[float]:
    """Open `n` silent connections; the seconds from each one's opening to the server's close."""
    async def one() -> float:
        t0 = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.wait_for(reader.read(), 120)
        finally:
            writer.close()
        return time.monotonic() - t0

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def run(n: int, header_timeout: float, n_grpc: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-tls-bench-"))
    cert, key = self_signed(tmp)
    port, grpc_port = free_port(), free_port()
    cfg = tmp / "gw.yaml"
    cfg.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "grpc_listen": f"127.0.0.1:{grpc_port}",
                               "log_decisions": False, "features": False, "data_dir": str(tmp / "data"),
                               "tls": {"cert_file": cert, "key_file": key}, "server": {"header_timeout_s": header_timeout},
                               "agents": []}))
    proc = subprocess.Popen([PY, "-m", "mma2a.cli", "serve", "--config", str(cfg), "--log-level", "warning"])
    try:
        await wait_port(port)
        await wait_port(grpc_port)
        await asyncio.sleep(2)  # the start's own allocations settle
        before = rss_mb(proc.pid)
        peak = before

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mb(proc.pid))
                await asyncio.sleep(0.1)

        watcher = asyncio.ensure_future(watch())
        t0 = time.monotonic()
        https, grpc_ = await asyncio.gather(silent(port, n), silent(grpc_port, n_grpc))
        all_closed = time.monotonic() - t0
        await asyncio.sleep(TRIM_EVERY_S + 2)  # the server gives freed memory back every TRIM_EVERY_S (or not)
        watcher.cancel()
        after = rss_mb(proc.pid)
    finally:
        stop([proc])
    return {"connections": {"https": n, "grpc": n_grpc}, "header_timeout_s": header_timeout,
            "closed_within_s": {"https_max": round(max(https, default=0), 2), "grpc_max": round(max(grpc_, default=0), 2),
                                "all": round(all_closed, 2)},
            "rss_mb": {"before": round(before, 1), "peak": round(peak, 1), "after_close": round(after, 1),
                       "after_minus_before": round(after - before, 1)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--grpc-connections", type=int, default=None, help="to the gRPC port (default: a quarter)")
    ap.add_argument("--header-timeout", type=float, default=10.0)
    args = ap.parse_args()
    n_grpc = args.connections // 4 if args.grpc_connections is None else args.grpc_connections
    print(json.dumps(asyncio.run(run(args.connections, args.header_timeout, n_grpc)), indent=2))


if __name__ == "__main__":
    main()
