"""The supervisor of `mma2a serve --workers N`: N gateway processes on one address, sharing their state through the
cluster layer (as uvicorn's `supervisors/multiprocess.py` runs its workers on one socket).

Each worker is an ordinary `mma2a serve` process listening with SO_REUSEPORT on the same host:port (the kernel
spreads connections among them, and a worker holding more than a sibling hands it new ones: `mma2a.balance`) and running in cluster mode: tasks, session pins, deduplication, history,
blobs, push configs, rule and agent changes are shared as between the gateways of a cluster. The NATS they
share is the one `--cluster` (or the config's `cluster:` section) names, else a `nats-server -js` this
supervisor starts on a free loopback port with its store in a temporary directory, requiring a token made at start
(given to the workers in their environment), and stops at the end; then the workers are the whole cluster, and share
their task records through files in a directory made for them (in memory, /dev/shm, where it has room for them:
cluster/task_files.py) rather than through NATS. A worker that dies is started again; SIGTERM/SIGINT drain every
worker, then stop NATS.

The supervisor only waits, so it holds only what it needs: the standard library, the nats-server starter, the task
directory and the listen socket. `mma2a serve --workers N` loads and checks the config (the gateway's config code, its
errors said as by any `mma2a serve`), then replaces itself (`exec_supervisor`: the same pid) with
`python -m mma2a.supervisor`, given the few settings it runs by (`Plan`, JSON) in its environment; each worker loads
the config again. Nothing here may import the gateway, the command line or a web server: tests/cluster/test_workers.py.

No credential on any command line: a process's command line is every user's of the host to read (/proc/PID/cmdline,
`ps`), its environment its own user's alone. An external NATS's URL may carry credentials (`nats://user:password@host`,
`nats://token@host`), so the plan (which holds it) and each worker's NATS URL go through the environment; the embedded
nats-server's token through its 0600 config file and the workers' environment; the URL is said with its credentials
replaced (`cluster.nats_urls`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from typing import NoReturn

from .balance import BALANCE_PREFIX, make_loads
from .cluster.nats_urls import without_credentials
from .cluster.server import NatsServer
from .cluster.task_files import NATS_PREFIX, held_dir, make_task_dir
from .errors import MMA2AError
from .listen import ListenError, listen_socket

PLAN_ENV = "MMA2A_SUPERVISOR_PLAN"  # the plan, JSON: what `serve --workers N` gives `python -m mma2a.supervisor`
WORKER_NATS_URL_ENV = "MMA2A_WORKER_NATS_URL"  # each worker's NATS (`serve --worker` reads it as --cluster)
WORKER_INDEX_ENV = "MMA2A_WORKER_INDEX"  # each worker's number (0 ...): worker 0 indexes the shared history file
WORKER_NATS_ENV = "MMA2A_WORKER_NATS"  # "embedded": the workers are the whole cluster (their own nats-server)
WORKER_TASKS_ENV = "MMA2A_WORKER_TASKS"  # with "embedded": the directory of the workers' task records
WORKER_BALANCE_ENV = "MMA2A_WORKER_BALANCE"  # the directory through which the workers spread connections evenly
# (`mma2a.balance`); unset: as the kernel's SO_REUSEPORT hash puts them
WORKER_CPU_ENV = "MMA2A_WORKER_CPU"  # the CPU a worker binds its event loop's thread to (`mma2a.cpus`), if any
WORKER_NATS_TOKEN_ENV = "MMA2A_WORKER_NATS_TOKEN"  # with "embedded": the token its nats-server requires (NATS access
# is admin access: without one, any process of the host could rewrite rules and agents and read every client's data)
QUICK_EXIT_S = 2.0  # a worker that exits this soon after its start, with status 2, cannot start (a bad config)


@dataclass(frozen=True)
class Plan:
    """What the supervisor runs by, taken from the checked config (`mma2a.cli.workers.plan_of`)."""

    count: int  # workers
    argv: tuple[str, ...]  # each worker's `mma2a serve` arguments, less --port/--cluster/--worker
    host: str
    port: int
    nats: str | None  # an external NATS (--cluster or the config's cluster section); None: embedded
    url_secret_env: str | None  # the workers sign payload URLs with one key: made here when this variable is unset
    task_bytes: int  # `limits.task_bytes`: sizes the workers' task directory
    drain_timeout_s: float  # `faults.drain_timeout_s`: how long the workers are given to drain at the end
    cpus: tuple[int, ...] = ()  # worker i's event loop runs on cpus[i] (`mma2a.cpus`); (): each runs anywhere
    balance: bool = True  # connections spread evenly among the workers (`mma2a.balance`); False: the kernel's hash


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def dies_with(parent: int) -> Callable[[], None] | None:
    """`preexec_fn` for the supervisor's children (the workers, the embedded nats-server): each gets SIGTERM when the
    supervisor dies, however it dies. A supervisor killed with SIGKILL (or by the OOM killer) never stops them itself,
    and they went on serving its port with the config of before, beside the workers of the next `serve --workers N`
    (SO_REUSEPORT): a client removed from the new config was still served on two connections of three
    (docs/security.md S15-3). ctypes is imported in the child, between its fork and its exec: the supervisor holds
    none of it. None where there is no prctl (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None

    def child() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died between the fork and the prctl: nothing would stop this one
            os._exit(1)

    return child


def token_of(n: int) -> str:
    """`secrets.token_urlsafe(n)`: n bytes of `os.urandom` (what `secrets` draws them from), URL-safe base64, without
    importing `secrets`, whose `hashlib` maps OpenSSL's libcrypto (3.7 MB of this process's ~20)."""
    return base64.urlsafe_b64encode(os.urandom(n)).rstrip(b"=").decode("ascii")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def exec_supervisor(plan: Plan) -> NoReturn:
    """This process becomes the supervisor (same pid, so signals and the caller's wait reach it), holding none of
    what it imported so far."""
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, PLAN_ENV: json.dumps(asdict(plan))}  # not an argument: the plan may hold NATS credentials
    os.execve(sys.executable, [sys.executable, "-m", "mma2a.supervisor"], env)


def read_plan(args: list[str]) -> Plan:
    """The plan `exec_supervisor` put in this process's environment (and out of the workers'); `ValueError` saying
    what is wrong with it (never its text: it may hold credentials)."""
    if args:
        raise ValueError(f"it takes no arguments, got {' '.join(args)!r}")
    text = os.environ.pop(PLAN_ENV, None)
    if text is None:
        raise ValueError(f"${PLAN_ENV} is not set")
    try:
        data = json.loads(text)
        return Plan(**{**data, "argv": tuple(data["argv"])})
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"${PLAN_ENV} is not such a plan: {type(exc).__name__}: {exc}") from None


def main(args: list[str]) -> int:
    """`python -m mma2a.supervisor` (its plan in $MMA2A_SUPERVISOR_PLAN): run the workers until SIGTERM/SIGINT; the
    exit status."""
    try:
        plan = read_plan(args)
    except ValueError as exc:  # run by hand: not what `serve --workers N` passes
        say(f"error: python -m mma2a.supervisor takes the plan `mma2a serve --workers N` makes, in its environment "
            f"({exc}); run `mma2a serve --workers N` instead")
        return 2
    try:
        return Supervisor(plan).run()
    except ListenError as exc:
        say(f"error: {exc}; choose another with --port or `listen:` in the config")
        return 2
    except MMA2AError as exc:  # the nats-server missing or not starting
        say(f"error: {exc.message}")
        return 2


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0


@dataclass
class Supervisor:
    """Starts, watches and stops the workers (and the embedded NATS, when no external one is given)."""

    plan: Plan
    workers: list[Worker] = field(default_factory=list)
    stopping: bool = False

    def run(self) -> int:
        plan = self.plan
        hold = listen_socket(plan.host, plan.port, reuse_port=True, listen=False)  # port taken: said now
        port = hold.getsockname()[1]  # --port 0: one free port, the same for every worker
        store = tasks = spread = None
        server: NatsServer | None = None
        env = dict(os.environ)
        secret_env = plan.url_secret_env
        if secret_env and not env.get(secret_env):  # the workers sign payload URLs with one key
            env[secret_env] = token_of(32)
        try:
            url = plan.nats
            if url is None:
                store = held_dir(tempfile.gettempdir(), NATS_PREFIX)  # 0700: the token's file is this user's alone
                token = token_of(32)
                conf = os.path.join(store, "auth.conf")  # a file, not `--auth`: a command line is every user's to read
                with open(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                    f.write(f'authorization {{ token: "{token}" }}\n')
                env[WORKER_NATS_TOKEN_ENV] = token  # a process's environment is readable by its user only
                server = NatsServer(store, args=["-c", conf], preexec=dies_with(os.getpid())).start()
                url = server.url
                tasks = make_task_dir(plan.count, plan.task_bytes)
                env[WORKER_TASKS_ENV] = tasks
            env[WORKER_NATS_URL_ENV] = url  # not `--cluster URL`: an external one may hold credentials
            if plan.balance:
                spread = held_dir(tempfile.gettempdir(), BALANCE_PREFIX)  # 0700: this user's processes only
                make_loads(spread, plan.count)
                env[WORKER_BALANCE_ENV] = spread
            args = [sys.executable, "-m", "mma2a.cli", "serve", *plan.argv, "--port", str(port), "--worker"]
            env[WORKER_NATS_ENV] = "embedded" if server is not None else "external"
            where = "embedded nats-server at " + url if server is not None else without_credentials(url)
            say(f"mma2a serve: {plan.count} workers on {plan.host}:{port}, sharing state through {where}")
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._stop)
            self.workers = [Worker(i) for i in range(plan.count)]
            for w in self.workers:
                self._start(w, args, env)
            return self._watch(args, env)
        finally:
            self._stop_all()
            hold.close()
            if server is not None:
                server.stop()
            for made in (store, tasks, spread):
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)

    def _start(self, w: Worker, args: list[str], env: dict[str, str]) -> None:
        # its own process group (a terminal's ^C reaches the supervisor, which drains it), in the supervisor's session:
        # a session of its own is a scheduling group of its own where the kernel groups by session (autogroup), and
        # on a busy host each wake-up of a worker then waited for its group's turn, not its own: the same bench served
        # 936 requests a second that way, 3,232 with the workers in the supervisor's session (docs/benchmarks.md)
        cpu = {WORKER_CPU_ENV: str(self.plan.cpus[w.index])} if w.index < len(self.plan.cpus) else {}
        w.proc = subprocess.Popen(args, env={**env, WORKER_INDEX_ENV: str(w.index), **cpu}, process_group=0,
                                  preexec_fn=dies_with(os.getpid()))
        w.started = time.monotonic()
        say(f"mma2a serve: worker {w.index} pid {w.proc.pid}" + (f" on CPU {cpu[WORKER_CPU_ENV]}" if cpu else ""))

    def _watch(self, args: list[str], env: dict[str, str]) -> int:
        while not self.stopping:
            time.sleep(0.2)
            for w in self.workers:
                assert w.proc is not None
                code = w.proc.poll()
                if code is None or self.stopping:
                    continue
                if code == 2 and time.monotonic() - w.started < QUICK_EXIT_S:  # it said why on stderr
                    say(f"error: worker {w.index} could not start (exit status 2); stopping")
                    return 2
                w.restarts += 1
                say(f"mma2a serve: worker {w.index} (pid {w.proc.pid}) exited with status {code}; starting it again")
                self._start(w, args, env)
        return 0

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _stop_all(self) -> None:
        """SIGTERM to every worker (each drains), then SIGKILL to any still running after the drain timeout."""
        self.stopping = True
        live = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.plan.drain_timeout_s + 10
        for p in live:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
