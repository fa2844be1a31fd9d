"""What each client's decisions take of the cluster's history stream: past its share, its own oldest leave the stream.

The stream (`<CLUSTER>_HISTORY`) is bounded by `history.max_bytes` and drops its oldest messages first when full. A
client whose decisions fill it fast (each of a new shape: 64 parts of media types of its own, ~45 KB) pushed every
other client's decisions out of it, and a gateway started after such a flood caught up from a stream missing them
(docs/security.md S17-6). So every gateway counts what each client's decisions take of the stream (`StreamShares`), from
a headers-only consumer of it (every gateway's messages since it started, each worker of `serve --workers N` too, in
the stream's order):
a batch's message names in a header the bytes each client's rows take of it (`CLIENTS_HEADER`). A client holding more
than `SEPARATE_PART` of its share (`history.max_bytes_per_client`) has its decisions published in messages of their own,
on a subject that names it (`<cluster>.history.<member>.c<digest>`), and past its share its oldest such messages leave
the count until it holds 90% of it, and the gateway purges them from the stream (every gateway's messages of that client
up to that sequence: one purge request, by subject). Every gateway counts the same messages in the same order, so each
reaches the same cut and the purges are one (the first removes them, the others find nothing left); a gateway that has
not heard a message yet counts less and purges later, never more. A client's flood thus evicts its own oldest decisions
from the stream, never another's; and clients well within their share keep sharing a message a batch (a message per
client a batch cost ~4.6 times the CPU a decision at 40 clients: bench/history_stream.py). Decisions without a client
(a gateway without authentication, where all are one's) are not counted: `history.max_bytes` holds them.

A client's messages are counted in runs (`StreamShares.step`, 1/256 of the share): a few hundred entries a client,
whatever its rate; a cut falls between runs, so a client past its share keeps 90% of it less at most one run. What
leaves the stream's front otherwise (its age, its `max_bytes`) leaves the counts as the stream's first sequence passes
it (`expire`).
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from collections.abc import Mapping

CLIENT_DIGEST = 20  # hex digits of a client's digest in its subjects (80 bits: no client picks another's)
NO_CLIENT = "_"  # the last token of a subject of decisions without a client
ROWS_HEADER = "Mma2a-Rows"  # the decisions a message of one client holds
CLIENTS_HEADER = "Mma2a-Clients"  # a shared message's bytes of each client: `c<digest>:bytes c<digest>:bytes ...`
SEPARATE_PART = 8  # a client holding more than 1/8 of its share of the stream has messages of its own
STEP_PARTS = 256  # a share is counted in runs of at least 1/256 of it
KEEP = 0.9  # a client past its share keeps this much of it


def client_token(sender: str | None) -> str:
    """The last token of the subjects of `sender`'s decisions: `c` and its digest (`_` without a client)."""
    if sender is None:
        return NO_CLIENT
    return "c" + hashlib.sha256(sender.encode("utf-8", "surrogatepass")).hexdigest()[:CLIENT_DIGEST]


def client_of(subject: str) -> str | None:
    """The client token of a history subject (None: decisions without a client, or a message from before subjects
    named their client)."""
    token = subject.rpartition(".")[2]
    if len(token) == CLIENT_DIGEST + 1 and token[0] == "c":
        return token
    return None


def stored_bytes(subject: str, value: int, headers: Mapping[str, str]) -> int:
    """What a message takes of a file-backed stream's bytes (its `max_bytes`), as nats-server counts it: a 22-byte
    record header, the subject, the headers (`NATS/1.0` and a line each, with their 4-byte length), the value and an
    8-byte checksum. `headers` as stored: those published (with `Nats-Expected-Stream`, which nats-py adds), not
    `Nats-Msg-Size`, which a headers-only consumer is given instead of the value."""
    size = 12 + sum(len(k) + len(v) + 4 for k, v in headers.items() if k != "Nats-Msg-Size")
    return 22 + len(subject) + 4 + size + value + 8


class _Runs:
    """One client's counted messages in runs, oldest first: each run's first and last sequence, bytes and decisions
    (parallel lists) — its own messages, which a purge removes —; its bytes in shared messages (`shared`: each run's last
    sequence and bytes), which leave with the stream's front; the sequence its own messages were purged up to."""

    __slots__ = ("firsts", "lasts", "sizes", "rows", "held", "shared_lasts", "shared_sizes", "shared", "cut")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.sizes: list[int] = []
        self.rows: list[int] = []
        self.held = 0
        self.shared_lasts: list[int] = []
        self.shared_sizes: list[int] = []
        self.shared = 0
        self.cut = 0


def shared_header(parts: Mapping[str, int]) -> str:
    """`CLIENTS_HEADER`'s value for each client's bytes of a shared message."""
    return " ".join(f"{client}:{size}" for client, size in parts.items())


def read_shared_header(value: str) -> list[tuple[str, int]]:
    """The clients and bytes of `CLIENTS_HEADER` (what does not read as such is left out)."""
    out = []
    for item in value.split():
        client, _, size = item.partition(":")
        if len(client) == CLIENT_DIGEST + 1 and client[0] == "c" and size.isdigit():
            out.append((client, int(size)))
    return out


class StreamShares:
    """What each client's messages take of the history stream, counted in the stream's order (a message heard out of
    it joins the run its sequence falls in). `counted` says, for a client past `share`, the sequence up to which its
    messages are to leave the stream and how many decisions they held. Clients that published nothing for `max_age_s`
    are forgotten (their messages have aged out of the stream)."""

    def __init__(self, share: int, max_age_s: float) -> None:
        self.share = share
        self.step = max(1, share // STEP_PARTS)
        self.max_age_s = max_age_s
        self._clients: dict[str, _Runs] = {}
        self._recent: OrderedDict[str, float] = OrderedDict()  # client -> when it last published, least recent first

    def __len__(self) -> int:
        return len(self._clients)

    def held(self, client: str) -> int:
        """Bytes of the stream `client`'s decisions take, as counted (its messages and its part of shared ones)."""
        runs = self._clients.get(client)
        return 0 if runs is None else runs.held + runs.shared

    def own(self, client: str) -> int:
        """Bytes of the stream `client`'s own messages take, as counted."""
        runs = self._clients.get(client)
        return 0 if runs is None else runs.held

    def runs(self, client: str) -> int:
        runs = self._clients.get(client)
        return 0 if runs is None else len(runs.firsts)

    def separate(self, client: str) -> bool:
        """Whether `client`'s decisions go in messages of their own: it holds more than `SEPARATE_PART` of its share."""
        runs = self._clients.get(client)
        return runs is not None and (runs.held + runs.shared) * SEPARATE_PART > self.share

    def _client(self, client: str, now: float) -> _Runs:
        r = self._clients.get(client)
        if r is None:
            r = self._clients[client] = _Runs()
        self._recent[client] = now
        self._recent.move_to_end(client)
        return r

    def counted_shared(self, seq: int, parts: list[tuple[str, int]], now: float) -> None:
        """A shared message `seq` holds `parts`: each client's bytes of it."""
        for client, size in parts:
            r = self._client(client, now)
            if r.shared_lasts and r.shared_sizes[-1] < self.step and seq > r.shared_lasts[-1]:
                r.shared_lasts[-1] = seq
                r.shared_sizes[-1] += size
            else:
                r.shared_lasts.append(seq)
                r.shared_sizes.append(size)
            r.shared += size
        self._expire(now)

    def counted(self, client: str, seq: int, size: int, rows: int, now: float) -> tuple[int, int] | None:
        """Message `seq` of `client` takes `size` bytes and holds `rows` decisions: None, or (the sequence up to which
        the client's messages leave the stream, the decisions they held) once it is past its share."""
        r = self._client(client, now)
        if seq <= r.cut:  # purged already
            return None
        n = len(r.lasts)
        if n == 0 or seq > r.lasts[-1]:
            if n and r.sizes[-1] < self.step:
                r.lasts[-1] = seq
                r.sizes[-1] += size
                r.rows[-1] += rows
            else:
                r.firsts.append(seq)
                r.lasts.append(seq)
                r.sizes.append(size)
                r.rows.append(rows)
        else:  # heard out of the stream's order: into the run it falls in (or after, before the next)
            i = max(0, bisect.bisect_right(r.firsts, seq) - 1)
            r.firsts[i] = min(r.firsts[i], seq)
            r.lasts[i] = max(r.lasts[i], seq)
            r.sizes[i] += size
            r.rows[i] += rows
        r.held += size
        self._expire(now)
        if r.held + r.shared <= self.share or len(r.firsts) == 1:
            return None
        keep = int(self.share * KEEP)
        k, gone = 0, 0
        while k < len(r.firsts) - 1 and r.held + r.shared > keep:  # the newest run stays, whatever its size
            r.held -= r.sizes[k]
            gone += r.rows[k]
            k += 1
        r.cut = r.lasts[k - 1]
        del r.firsts[:k], r.lasts[:k], r.sizes[:k], r.rows[:k]
        return r.cut, gone

    def expire(self, first_seq: int) -> None:
        """The stream's first message is now `first_seq` (what was before it aged out or was discarded past its
        `max_bytes`): runs that ended before it leave the counts."""
        for r in self._clients.values():
            k = 0
            while k < len(r.shared_lasts) and r.shared_lasts[k] < first_seq:
                r.shared -= r.shared_sizes[k]
                k += 1
            del r.shared_lasts[:k], r.shared_sizes[:k]
            k = 0
            while k < len(r.lasts) and r.lasts[k] < first_seq:
                r.held -= r.sizes[k]
                k += 1
            del r.firsts[:k], r.lasts[:k], r.sizes[:k], r.rows[:k]

    def _expire(self, now: float) -> None:
        """Forget the clients that published nothing for `max_age_s` (their messages have aged out of the stream)."""
        while self._recent:
            client, at = next(iter(self._recent.items()))
            if at >= now - self.max_age_s:
                return
            del self._recent[client], self._clients[client]
