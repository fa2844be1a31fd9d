"""Connections spread evenly among the workers of `mma2a serve --workers N` (`mma2a.balance`): a worker holding more
connections than a sibling hands it the next one it accepts. Real TCP connections, real worker processes."""

from __future__ import annotations

import array
import asyncio
import contextlib
import http.client
import os
import re
import signal
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from mma2a.balance import FULL_TRIES, GONE, LOADS, Q, SLOT, Balance, make_loads
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.certs import CA

from .test_security import bearer
from .test_workers import banners, serve_workers, until_banners, until_listeners, worker_pids

pytestmark = pytest.mark.timeout(300)
KEPT = {"server": {"keep_alive_s": 600}}  # the test's connections stay open between its requests, however slow the host


@contextlib.contextmanager
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A client's connection and the server's side of it, accepted from a real listener."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        yield client, server


def balances(tmp_path: Path, workers: int = 2) -> list[Balance]:
    make_loads(str(tmp_path), workers)
    return [Balance(str(tmp_path), i) for i in range(workers)]


def test_a_connection_goes_to_the_sibling_holding_fewest_counting_those_on_their_way(tmp_path: Path) -> None:
    a, b, c = balances(tmp_path, 3)
    for x in (a, b, c):
        x.open()
    a.publish(3)
    b.publish(1)
    c.publish(2)
    assert a.place(3) == 1  # the fewest
    with tcp_pair() as (_, first), tcp_pair() as (_, second):
        assert a.hand(first, 1) and a.hand(second, 1)  # on their way: b's at once, before b has taken them
        assert a.place(3) == 2  # b 1 + 2 on their way, c 2
        assert c.place(2) is None  # alike (a 3, b 3): stays
        taken = b.receive()
        assert len(taken) == 2
        b.taken_in(3)  # served: b's own count says them from now on, and they are off their way
        assert a.place(3) == 2  # b 3 (not 5), c 2
        for conn in taken:
            conn.close()
    c.close()  # closed: says it holds GONE, so nothing goes to it
    assert a.place(3) is None
    assert a.place(4) == 1
    for x in (a, b):
        x.close()


def test_a_handed_connection_is_served_by_the_sibling_and_the_client_never_knows(tmp_path: Path) -> None:
    a, b = balances(tmp_path)
    a.open()
    b.open()
    with tcp_pair() as (client, accepted):
        assert a.hand(accepted, 1)
        accepted.close()  # the accepting worker's copy: the connection lives on in b
        [taken] = b.receive()
        with taken:
            client.sendall(b"ping")
            assert taken.recv(4) == b"ping"
            taken.sendall(b"pong")
            assert client.recv(4) == b"pong"
    assert (a.handed, b.received) == (1, 1)
    assert b.receive() == []  # nothing more
    a.close()
    b.close()


def test_a_burst_is_spread_as_it_comes_and_sent_in_one_message_a_sibling(tmp_path: Path) -> None:
    """40 connections accepted in one batch while the sibling reads nothing yet: 20 each. One message per sibling and
    batch, since a datagram socket queues only `net.unix.max_dgram_qlen` messages (10 by default): 20 hand-overs
    one by one would leave all but the first 10 where they were accepted."""
    a, b = balances(tmp_path)
    a.open()
    b.open()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        clients = [socket.create_connection(listener.getsockname()) for _ in range(40)]
        kept = []
        for _ in range(40):
            conn, _ = listener.accept()
            if not a.route(conn, len(kept)):
                kept.append(conn)
        assert a.flush() == []  # b took every one placed with it
        taken = b.receive()
        assert (len(kept), len(taken)) == (20, 20)
        b.taken_in(len(taken))
        assert a.place(20) is None and b.place(20) is None  # even
        for conn in kept + taken:  # each a live connection to one of the clients
            conn.sendall(b"x")
        assert sorted(c.recv(1) for c in clients) == [b"x"] * 40
        for conn in kept + taken + clients:
            conn.close()
    a.close()
    b.close()


def test_what_a_sibling_does_not_take_is_served_where_it_was_accepted(tmp_path: Path) -> None:
    a, b = balances(tmp_path)
    a.open()
    b.open()
    with tcp_pair() as (_, one), tcp_pair() as (_, two):
        assert a.route(one, 1)  # placed with b
        b.close()  # b closes before the batch is sent
        assert a.flush() == [one]  # refused: a serves it
        assert a.place(5) is None  # and counts nothing on its way to b
        assert not a.route(two, 1)
    a.close()


def test_a_busy_sibling_gets_its_connections_once_it_has_room_and_never_makes_them_wait_long(tmp_path: Path) -> None:
    """A sibling whose queue is full (it reads nothing for a while: `net.unix.max_dgram_qlen` messages wait) gets
    what was placed with it at a later flush; past `FULL_TRIES` flushes in a row, they are served where accepted."""
    a, b = balances(tmp_path)
    a.open()
    b.open()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        clients, queued = [], 0
        while True:  # fill b's queue, one message at a time
            clients.append(socket.create_connection(address))
            conn, _ = listener.accept()
            sent = a.hand(conn, 1)
            conn.close()
            if not sent:
                break
            queued += 1
        assert queued >= 1  # (net.unix.max_dgram_qlen + 1: 11 by default)
        clients.append(socket.create_connection(address))
        late, _ = listener.accept()
        assert a.route(late, 100)  # placed with b (a holds 100, b those on their way)
        assert a.flush() == [] and a.waiting  # no room yet: kept for the next flush
        assert len(b.receive()) == queued  # b reads
        assert a.flush() == [] and not a.waiting  # now it has it
        [got] = b.receive()
        got.sendall(b"y")
        assert clients[-1].recv(1) == b"y"
        got.close()
        for _ in range(queued):  # full again, and b reads nothing this time
            clients.append(socket.create_connection(address))
            conn, _ = listener.accept()
            assert a.hand(conn, 1)
            conn.close()
        clients.append(socket.create_connection(address))
        stuck, _ = listener.accept()
        assert a.route(stuck, 100)
        for _ in range(FULL_TRIES):
            assert a.flush() == [] and a.waiting
        assert a.flush() == [stuck] and not a.waiting  # served where it was accepted
        stuck.sendall(b"z")
        assert clients[-1].recv(1) == b"z"
        for c in clients + [stuck]:
            c.close()
    a.close()
    b.close()


def test_what_is_not_a_tcp_connection_is_closed_not_served(tmp_path: Path) -> None:
    """Anything this user's processes send to a worker's socket: a pipe, a Unix socket: closed on arrival."""
    a, b = balances(tmp_path)
    b.open()
    read, write = os.pipe()
    unix_a, unix_b = socket.socketpair()
    with unix_a, unix_b, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
        out.sendmsg([b"c"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [read, unix_a.fileno()]))], 0,
                    str(tmp_path / "w1.sock"))
        os.close(read)
        unix_a.close()
        assert b.receive() == []
        with pytest.raises(BrokenPipeError):  # the received read end was closed: no reader is left
            os.write(write, b"x")
        assert unix_b.recv(1) == b""  # the received end was closed: end of file
    os.close(write)
    a.close()
    b.close()


def test_a_sibling_gone_keeps_nothing_waiting_and_is_asked_again_once_started_again(tmp_path: Path) -> None:
    a, _ = balances(tmp_path)
    a.open()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker that starts, and dies without a word (SIGKILL, the OOM killer) holding what it was handed
        held = Balance(str(tmp_path), 1)
        held.open()
        os.write(ready_w, b"1")
        os.read(hold_r, 1)  # until killed
        os._exit(held.received)
    assert os.read(ready_r, 1) == b"1"
    assert a.place(1) == 1  # it said it holds nothing
    with tcp_pair() as (_, doomed):
        assert a.hand(doomed, 1)  # on its way to a worker that dies before taking it
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    for fd in (ready_r, ready_w, hold_r, hold_w):
        os.close(fd)
    assert a.place(2) == 1  # its slot says 0, plus 1 on its way
    with tcp_pair() as (client, accepted):
        assert not a.hand(accepted, 1)  # refused: the accepting worker keeps it
        assert a.place(5) is None  # and does not ask the dead one again
        client.sendall(b"still here")
        assert accepted.recv(10) == b"still here"
    again = Balance(str(tmp_path), 1)
    again.open()  # started again: a new generation, and what its predecessor never took is not on its way any more
    assert a.place(1) == 1
    with tcp_pair() as (_, accepted):
        assert a.hand(accepted, 1)
    assert len(again.receive()) == 1
    again.taken_in(1)
    assert a.place(1) is None  # 1 each
    again.close()
    a.close()


def test_what_a_dead_worker_placed_and_never_sent_is_off_its_way_once_that_worker_is_started_again(
        tmp_path: Path) -> None:
    """A worker killed between placing connections with a sibling and sending them (one accept's step, or up to
    ~62 ms while the sibling's queue is full): they died with it. Until it is started again they count on their way
    to the sibling; its successor no longer counts them, so the sibling is not taken for fuller than it is."""
    make_loads(str(tmp_path), 2)
    b = Balance(str(tmp_path), 1)
    b.open()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # worker 0: places two connections with b (it holds none), and is killed before it sends them
        dying = Balance(str(tmp_path), 0)
        dying.open()
        with tcp_pair() as (_, one), tcp_pair() as (_, two):
            placed = dying.route(one, 5) and dying.route(two, 5)
            os.write(ready_w, b"1" if placed else b"0")
            os.read(hold_r, 1)  # until killed
        os._exit(0)
    assert os.read(ready_r, 1) == b"1"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    for fd in (ready_r, ready_w, hold_r, hold_w):
        os.close(fd)
    assert b.receive() == []  # nothing was sent
    again = Balance(str(tmp_path), 0)
    assert again.place(1) is None  # before it opens: b holds 0 + the 2 on their way, not fewer than 1
    again.open()
    assert again.place(1) == 1  # b holds none: the dead worker's placings are off their way
    with tcp_pair() as (client, accepted):
        assert again.route(accepted, 1)
        assert again.flush() == []
        [got] = b.receive()
        b.taken_in(1)
        got.sendall(b"b")
        assert client.recv(1) == b"b"
        got.close()
    assert again.place(1) is None  # 1 each: what was sent is counted once, as b's
    again.close()
    b.close()


def test_a_worker_not_yet_open_refuses_and_one_closed_is_never_chosen(tmp_path: Path) -> None:
    a, b = balances(tmp_path)
    a.open()
    assert a.place(4) is None  # b has never started (generation 0)
    b.open()
    assert a.place(4) == 1
    b.close()
    assert a.place(4) is None  # closed: GONE
    with tcp_pair() as (_, accepted):
        assert not a.hand(accepted, 1)
    assert GONE > 1 << 40
    a.close()


def held_by(pids: dict[int, int], port: int) -> dict[int, int]:
    """How many established connections to 127.0.0.1:`port` each worker (index -> pid) holds."""
    local = f"0100007F:{port:04X}"
    inodes = {row.split()[9] for row in Path("/proc/net/tcp").read_text().splitlines()[1:]
              if row.split()[1] == local and row.split()[3] == "01"}
    out = {}
    for index, pid in pids.items():
        held = 0
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                held += link.startswith("socket:[") and link[8:-1] in inodes
        out[index] = held
    return out


def worker_holding(connection: http.client.HTTPConnection, pids: dict[int, int], port: int) -> int:
    """The worker (index) holding the server's side of a client's connection."""
    assert connection.sock is not None
    mine = f"0100007F:{connection.sock.getsockname()[1]:04X}"
    [inode] = [row.split()[9] for row in Path("/proc/net/tcp").read_text().splitlines()[1:]
               if row.split()[1] == f"0100007F:{port:04X}" and row.split()[2] == mine]
    [index] = [i for i, pid in pids.items() if any(
        os.readlink(fd) == f"socket:[{inode}]" for fd in Path(f"/proc/{pid}/fd").iterdir() if fd.is_symlink())]
    return index


def spread_counts(connection: http.client.HTTPConnection) -> tuple[int, int]:
    """The connections handed and received by the worker serving `connection`, from its /metrics."""
    connection.request("GET", "/metrics", headers=bearer("alice"))
    response = connection.getresponse()
    text = response.read().decode()
    assert response.status == 200, text
    handed = re.search(r"^mma2a_connections_handed_total (\S+)$", text, re.M)
    received = re.search(r"^mma2a_connections_received_total (\S+)$", text, re.M)
    assert handed and received, text
    return int(float(handed.group(1))), int(float(received.group(1)))


def answered(connection: http.client.HTTPConnection) -> int:
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    return response.status


async def test_sixteen_connections_opened_one_after_another_are_held_eight_by_each_worker(tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url, KEPT) as served:
        pids = worker_pids(served.log)
        connections = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=30) for _ in range(16)]
        try:
            for c in connections:  # each answered before the next opens: every worker's count said by then
                assert await asyncio.to_thread(answered, c) == 200
            assert held_by(pids, served.port) == {0: 8, 1: 8}
            for c in connections:  # each still served where it is now (kept alive)
                assert await asyncio.to_thread(answered, c) == 200
            # each worker's /metrics says what it handed and took: what one handed, the other took
            by_worker = {worker_holding(c, pids, served.port): c for c in connections}
            counts = {i: await asyncio.to_thread(spread_counts, c) for i, c in by_worker.items()}
            assert counts[0][0] == counts[1][1] and counts[1][0] == counts[0][1], counts
            assert counts[0][0] + counts[1][0] == handed_in_all(balance_dir(pids))  # as the shared file says
        finally:
            for c in connections:
                c.close()


def balance_dir(pids: dict[int, int]) -> str:
    """The directory the supervisor gave the workers (`MMA2A_WORKER_BALANCE` in their environment)."""
    [directory] = {Path(f"/proc/{pid}/environ").read_bytes().split(b"MMA2A_WORKER_BALANCE=")[1].split(b"\0")[0]
                   for pid in pids.values()}
    return directory.decode()


def handed_in_all(directory: str) -> int:
    """The connections the workers have handed each other so far (the loads file's handed table)."""
    data = (Path(directory) / LOADS).read_bytes()
    workers = Q.unpack_from(data, 0)[0]
    at = Q.size + workers * SLOT.size
    return sum(Q.unpack_from(data, at + k * Q.size)[0] for k in range(workers * workers))


async def test_over_tls_a_connection_is_handed_before_its_handshake_and_the_sibling_makes_it(tmp_path: Path) -> None:
    """The descriptor moves before a byte is read: the worker it reaches does the TLS handshake itself. Connections
    are opened one at a time until one was handed over (the kernel's hash put it on the worker holding more), then
    it and every other is used."""
    ca = CA(tmp_path)
    server = ca.issue("gateway")
    tls = {"tls": {"cert_file": server.cert_file, "key_file": server.key_file}}
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url, {**KEPT, **tls}) as served:
        pids = worker_pids(served.log)
        directory = balance_dir(pids)
        connections: list[http.client.HTTPSConnection] = []
        try:
            while handed_in_all(directory) == 0:
                assert len(connections) < 64  # a hash that never once put one on the fuller worker: ~2^-32
                connections.append(http.client.HTTPSConnection("127.0.0.1", served.port, timeout=30, context=context))
                assert await asyncio.to_thread(answered, connections[-1]) == 200
            for c in connections:  # the handed one among them: each answered again over its TLS session
                assert await asyncio.to_thread(answered, c) == 200
            held = held_by(pids, served.port)
            assert abs(held[0] - held[1]) <= 1 and sum(held.values()) == len(connections), held
        finally:
            for c in connections:
                c.close()


async def test_with_a_worker_gone_the_other_serves_every_connection_and_they_spread_once_it_is_back(
        tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url, KEPT) as served:
        pids = worker_pids(served.log)
        os.kill(pids[1], signal.SIGKILL)
        await until_listeners(served.port, 1)  # its socket closed: no connection is put in a dead worker's queue
        connections = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=30) for _ in range(12)]
        try:
            for c in connections[:6]:  # worker 1 gone (or starting again): each still answered
                assert await asyncio.to_thread(answered, c) == 200
            await until_banners(served.log, served.proc, 3)  # worker 1 is back and accepting
            for c in connections[6:]:
                assert await asyncio.to_thread(answered, c) == 200
            # whenever it came back, the connections after it evened the two out
            assert held_by(worker_pids(served.log), served.port) == {0: 6, 1: 6}
        finally:
            for c in connections:
                c.close()
        assert banners(served.log) == 3


async def test_no_balance_leaves_the_spread_to_the_kernel_and_serves_alike(tmp_path: Path) -> None:
    async with run_agent(make_card("echo"), RecordingExecutor(echo=True)) as agent_url, \
            serve_workers(tmp_path, "echo", agent_url, KEPT, args=("--no-balance",)) as served:
        pids = worker_pids(served.log)
        for pid in pids.values():
            assert "MMA2A_WORKER_BALANCE" not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        connections = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=30) for _ in range(8)]
        try:
            for c in connections:
                assert await asyncio.to_thread(answered, c) == 200
            assert sum(held_by(pids, served.port).values()) == 8
        finally:
            for c in connections:
                c.close()
