"""The first hour with the CLI, as a newcomer hit it (issue 23): `serve`, `send`, `agents`, `samples`, help.

Real processes: reference agents and a gateway started with `mma2a agent` / `mma2a serve`
on free loopback ports, `mma2a send` as a separate process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from mma2a.cli import app
from mma2a.serving import free_port
from tests.media import wav_bytes

# the `network` fixture (three agents, a gateway, a send that waits for them, the vision agent loading its models) is
# set up within the first test's pytest-timeout: 62 s at load 20 of the default 120 s, so the module gets 600 s
pytestmark = pytest.mark.timeout(600)

CLI = [sys.executable, "-m", "mma2a.cli"]
TOKEN = "first-hour-admin-token"


def mma2a(*args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False)


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The command in this process (typer's runner): what the user sees, without a Python start-up per call."""
    from mma2a.cli.main import _register

    _register()
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def start(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return out, err


def wait_line(proc: subprocess.Popen[str], pattern: str, timeout: float = 90) -> str:
    """Read the process's stderr until a line matches (the banner); fail with what it printed otherwise."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return line
    raise AssertionError(f"no line matching {pattern!r}; stderr so far: {''.join(seen)!r}")


# --- start-up errors -----------------------------------------------------------------------

def test_serve_on_a_taken_port_is_one_line_with_status_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = mma2a("serve", "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr == (f"error: cannot listen on 127.0.0.1:{port}: address already in use (another process listens "
                           "there); choose another with --port or `listen:` in the config\n")
    assert "mma2a gateway on" not in proc.stderr  # no banner for a gateway that never listened


def test_agent_on_a_taken_port_is_one_line_with_status_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = mma2a("agent", "analyst", "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr == (f"error: cannot listen on 127.0.0.1:{port}: address already in use (another process listens "
                           "there); choose another with --port\n")


def test_serve_with_a_bad_rules_file_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("rules:\n  - name: a\n    match: {modality: image}\n    action: {route_too: x}\n")
    (tmp_path / "gateway.yaml").write_text(f"listen: 127.0.0.1:{free_port()}\nrules: rules.yaml\n")
    code, _, err = cli("serve", "--config", str(tmp_path / "gateway.yaml"))
    assert code == 2
    rules = tmp_path / "rules.yaml"
    assert err.splitlines() == [
        f"error: {rules}:3: rule 'a': match.modality: 'image' is not a media type (expected type/subtype); did you mean 'image/*'?",
        f"error: {rules}:4: rule 'a': action.route_too: unknown action (expected one of route_to, broadcast_to, load_balance, "
        "transform, drop, clone_and_route_to, capability, learn); did you mean 'route_to'?",
    ]


def test_serve_with_a_bad_config_field_names_it(tmp_path: Path) -> None:
    (tmp_path / "gateway.yaml").write_text("agents:\n  - {name: v, url: ftp://x}\n")
    code, _, err = cli("serve", "--config", str(tmp_path / "gateway.yaml"))
    assert code == 2
    assert err == f"error: {tmp_path / 'gateway.yaml'}: agents.0.url: Value error, must be an http:// or https:// URL\n"


def test_serve_with_a_bare_port_or_a_url_without_scheme_suggests_the_fix(tmp_path: Path) -> None:
    (tmp_path / "port.yaml").write_text("listen: 8899\n")
    code, _, err = cli("serve", "--config", str(tmp_path / "port.yaml"))
    assert code == 2
    assert err == f"error: {tmp_path / 'port.yaml'}: listen: Value error, must be HOST:PORT (did you mean 127.0.0.1:8899?)\n"
    (tmp_path / "url.yaml").write_text("agents:\n  - {name: vision, url: 127.0.0.1:9101}\n")
    code, _, err = cli("serve", "--config", str(tmp_path / "url.yaml"))
    assert code == 2
    assert err == (f"error: {tmp_path / 'url.yaml'}: agents.0.url: Value error, must be an http:// or https:// URL "
                   "(did you mean http://127.0.0.1:9101?)\n")


def test_agent_with_a_misspelled_name_suggests_the_right_one() -> None:
    code, _, err = cli("agent", "visoin", "--port", str(free_port()))
    assert code == 2
    assert err == ("error: unknown agent 'visoin'; choose one of vision, speech, speaker, captioner, analyst, keyword; "
                   "did you mean 'vision'?\n")


def test_serve_with_an_unreachable_cluster_is_one_line_and_closes_what_it_opened() -> None:
    env = {**os.environ, "MMA2A_URL_SECRET": "first-hour-cluster-secret"}
    nats = f"nats://127.0.0.1:{free_port()}"
    proc = mma2a("serve", "--port", str(free_port()), "--cluster", nats, env=env)
    assert proc.returncode == 2
    # one line: no traceback, no "Unclosed client session" or "Task was destroyed" after it
    assert proc.stderr == f"error: cluster.nats: cannot connect to {nats}: nats: no servers available for connection\n"


def test_serve_stopped_by_sigterm_cleans_up_after_itself(tmp_path: Path) -> None:
    """The gateway's own start/stop run inside uvicorn's signal capture: its temporary blob store is gone after SIGTERM."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = start("serve", "--port", str(free_port()), env={**os.environ, "TMPDIR": str(tmp)})
    try:
        wait_line(proc, r"mma2a gateway on")
        assert [p.name[:12] for p in tmp.iterdir()] == ["mma2a-blobs-"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == -signal.SIGTERM  # re-raised after the graceful shutdown, as supervisors expect
    assert list(tmp.iterdir()) == []


def test_send_says_when_no_gateway_comes(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("hello")
    port = free_port()
    code, _, err = cli("send", str(tmp_path / "note.txt"), "--gateway", f"http://127.0.0.1:{port}", "--wait", "0.5")
    assert code == 1
    assert err.startswith(f"error: cannot reach the gateway at http://127.0.0.1:{port} (waited 0.5 s): ")
    assert err.endswith("is `mma2a serve` running there? (to wait longer: --wait SECONDS, or wait= in the SDK)\n")


# --- a network started as the README starts it -------------------------------------------

@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """vision, analyst and speech agents and a gateway; `send` is started before the gateway, as `&` in a shell races."""
    d = tmp_path_factory.mktemp("network")
    assert cli("samples", str(d), "--only", "crack.png")[0] == 0
    (d / "tone.wav").write_bytes(wav_bytes(1.0))
    (d / "broken.png").write_bytes((d / "crack.png").read_bytes()[:400])  # a whole header, then the pixels cut off
    ports = {name: free_port() for name in ("vision", "analyst", "speech", "gateway")}
    (d / "gateway.yaml").write_text(
        f"listen: 127.0.0.1:{ports['gateway']}\n"
        "admin: {token_env: FIRST_HOUR_TOKEN}\n"
        "timeout_s: 120\n"  # the vision agent loads its models on its first photo: slow on a loaded CI machine
        "agents:\n"
        + "".join(f"  - {{name: {n}, url: http://127.0.0.1:{ports[n]}}}\n" for n in ("vision", "analyst"))
        + f"  - {{name: speech, url: http://127.0.0.1:{ports['speech']}, transformer: true}}\n"
        + "rules:\n"
        "  rules:\n"
        "    - name: dock-3-to-analyst\n"
        "      match: {features: {camera: {eq: dock-3}}}\n"
        "      action: {route_to: analyst}\n"
    )
    env = {**os.environ, "FIRST_HOUR_TOKEN": TOKEN}
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    procs = [start("agent", n, "--port", str(ports[n]), "--gateway", gateway) for n in ("vision", "analyst", "speech")]
    sender = start("send", str(d / "crack.png"), "--text", "what is wrong with this lid?", "--gateway", gateway, "--wait", "120")
    time.sleep(0.5)  # the sender is already waiting when the gateway starts
    serve = start("serve", "--config", str(d / "gateway.yaml"), env=env)
    procs += [serve]
    try:
        banner = wait_line(serve, r"mma2a gateway on")
        health = httpx.get(gateway + "/healthz", timeout=10).json()  # the banner means it listens: no retry here
        out, err = sender.communicate(timeout=180)
        yield {"dir": d, "gateway": gateway, "env": env, "banner": banner, "health": health,
               "first": (sender.returncode, out, err)}
    finally:
        for p in [sender, *procs]:
            stop(p)


def test_send_started_before_the_gateway_waits_for_it_and_its_agents(network: dict[str, Any]) -> None:
    code, out, err = network["first"]
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "part 0 (text/plain) → analyst [capability]"
    assert lines[1] == "part 1 (image/png) → vision [capability]"  # the specialist, not analyst (README's promise)
    assert lines[2] == "  runner-up analyst (0.53) lost to vision (1.20): specialisation 0.33 vs 1.00"
    assert re.fullmatch(r"task \S+ completed", lines[3])


def test_the_banner_comes_when_the_gateway_listens(network: dict[str, Any]) -> None:
    assert network["banner"].startswith(f"mma2a gateway on {network['gateway']} (")
    assert network["health"]["status"] == "ok"
    assert network["health"]["rulesVersion"] == 1  # one rule set installed, whatever the agent registrations did


def test_send_feature_reaches_a_rule(network: dict[str, Any]) -> None:
    code, out, err = cli("send", str(network["dir"] / "crack.png"), "--gateway", network["gateway"], "--feature", "camera=dock-3")
    assert code == 0, err
    assert out.splitlines()[0] == "part 0 (image/png) → analyst [rule dock-3-to-analyst]"


def test_send_text_alone_and_nothing_at_all(network: dict[str, Any]) -> None:
    code, out, err = cli("send", "--text", "the lid of my coffee machine is cracked", "--gateway", network["gateway"])
    assert code == 0, err
    assert out.splitlines()[0] == "part 0 (text/plain) → analyst [capability]"
    code, _, err = cli("send", "--gateway", network["gateway"])
    assert code == 2 and "Invalid value for 'FILE': nothing to send: give one or more files, or --text TEXT" in err


def test_send_json_prints_integers_as_integers(network: dict[str, Any]) -> None:
    code, out, err = cli("send", str(network["dir"] / "crack.png"), "--gateway", network["gateway"], "--json")
    assert code == 0, err
    route = json.loads(out)["task"]["metadata"]["https://mma2a.dev/ext/multimodal/v1"]["route"]
    assert route[0]["index"] == 0 and isinstance(route[0]["index"], int)
    assert '"index": 0.0' not in out and ".0," not in out


def test_send_failure_says_why_and_exits_1(network: dict[str, Any]) -> None:
    # the header reads as a PNG (so the gateway forwards it), but the pixels are cut off: the vision agent fails
    code, out, err = cli("send", str(network["dir"] / "broken.png"), "--gateway", network["gateway"], "--to", "vision")
    assert code == 1, out + err
    assert out.splitlines()[0] == "part 0 (image/png) → vision [capability]"
    assert re.search(r"^task \S+ failed$", out, re.M), out
    assert err.strip().splitlines()[-1].startswith("failed: "), err


def test_a_voice_note_without_words_completes_and_says_so(network: dict[str, Any]) -> None:
    # a tone holds no words: the analyst's card takes audio (it hears the words and measures the voice itself), so the
    # recording reaches it natively and its answer says no speech was recognised; the task completes
    code, out, err = cli("send", str(network["dir"] / "tone.wav"), "--gateway", network["gateway"], "--to", "analyst")
    assert code == 0, out + err
    assert out.splitlines()[0] == "part 0 (audio/wav) → analyst [capability]", out
    assert "a voice note: no speech recognised in the recording" in out, out
    assert re.search(r"^task \S+ completed$", out, re.M), out


def test_agents_without_a_token_says_which_variable(network: dict[str, Any]) -> None:
    code, _, err = cli("agents", "--gateway", network["gateway"], env={"MMA2A_ADMIN_TOKEN": ""})
    assert code == 2
    assert err == ("error: the admin API needs the gateway's admin token (the variable named by admin.token_env in its "
                   "config): set MMA2A_ADMIN_TOKEN, or name another variable with --token-env NAME\n")
    code, _, err = cli("agents", "--gateway", network["gateway"], "--token-env", "FIRST_HOUR_TOKEN", env={"FIRST_HOUR_TOKEN": "wrong"})
    assert code == 1
    assert err.startswith(f"error: {network['gateway']} answered 40")
    assert err.endswith("the token in FIRST_HOUR_TOKEN is not the gateway's admin token\n")


def test_agents_table_fits_80_columns(network: dict[str, Any]) -> None:
    code, out, err = cli("agents", "--gateway", network["gateway"], "--token-env", "FIRST_HOUR_TOKEN",
                         env={"FIRST_HOUR_TOKEN": TOKEN, "COLUMNS": "80"})
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = " ".join(lines)
    for name in ("vision", "analyst", "speech"):
        assert f"│ {name} " in out
    assert "image/webp" in cells and "audio/x-wav" in cells and "…" not in cells


# --- help, samples, bench ------------------------------------------------------------------

def test_help_has_no_type_noise() -> None:
    from mma2a.cli.main import _register

    _register()
    for args in (["--help"], ["send", "--help"], ["serve", "--help"], ["rules", "check", "--help"], ["bench", "routing", "--help"],
                 ["agents", "--help"], ["samples", "--help"], ["features", "--help"], ["eval", "crossmodal", "--help"]):
        result = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
        assert result.exit_code == 0, (args, result.output)
        assert "<bool>" not in result.stdout, args
        assert "--help" in result.stdout


def test_bench_routing_takes_several_counts_after_one_option() -> None:
    code, out, err = cli("bench", "routing", "--rules", "10", "20", "--messages", "50", "--linear-messages", "20", "--rounds", "1",
                         "--json")
    assert code == 0, err
    assert [json.loads(line)["rules"] for line in out.splitlines()] == [10, 20]


def test_samples_writes_the_media_the_docs_use(tmp_path: Path) -> None:
    code, _, err = cli("samples", str(tmp_path / "media"))
    assert code == 0, err
    from mma2a.features.producer import sniff_modality

    kinds = {p.name: sniff_modality((tmp_path / "media" / p.name).read_bytes()[:4096], p.name)
             for p in (tmp_path / "media").iterdir()}
    assert kinds == {"coffee.jpg": "image/jpeg", "note.wav": "audio/wav", "crack.png": "image/png", "line-3.mp4": "video/mp4",
                     "voice.wav": "audio/wav", "cube.obj": "model/obj", "report.txt": "text/plain"}
    code, _, err = cli("samples", str(tmp_path / "media" / "crack.png"))
    assert code == 2
    assert err == f"error: {tmp_path / 'media' / 'crack.png'}: exists and is not a directory\n"


def test_samples_without_scikit_image_writes_the_others_and_says_what_is_missing(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from mma2a.cli.main import _register

    _register()
    monkeypatch.setitem(sys.modules, "skimage", None)  # as on a machine without the `photos` extra: the import fails
    result = CliRunner().invoke(app, ["samples", str(tmp_path), "--only", "coffee.jpg", "--only", "report.txt"])
    assert result.exit_code == 1
    assert result.stderr == ("error: coffee.jpg: not written, needs scikit-image, whose package ships the photo "
                             "(pip install 'mma2a[photos]')\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


# --- a newcomer's mistakes with `mma2a send`: each error names what is wrong and what to do -------------------

def test_send_with_a_gateway_address_without_its_scheme_suggests_one(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("hello")
    code, _, err = cli("send", str(tmp_path / "note.txt"), "--gateway", "127.0.0.1:8800")
    assert code == 2
    assert "Invalid value for '--gateway': '127.0.0.1:8800' is not an http:// or https:// URL; did you mean " \
           "http://127.0.0.1:8800?" in err


async def send_process(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`mma2a send` as its own process (the gateways below run on this test's event loop)."""
    import asyncio

    proc = await asyncio.create_subprocess_exec(*CLI, "send", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_send_to_a_gateway_without_agents_says_to_configure_some(tmp_path: Path) -> None:
    from tests.gateway.conftest import gateway

    (tmp_path / "report.txt").write_text("the lid is cracked")
    async with gateway({}) as (_, url):
        code, out, err = await send_process(str(tmp_path / "report.txt"), "--gateway", url)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "error: mma2a gateway refuses the message: part 0 (text/plain): no agent accepts it and no transform chain "
        "reaches one that does (no agent is registered)",
        "hint: the gateway has no agents: list them under `agents:` in its config (docs/operations.md)"]


async def test_send_of_a_file_no_agent_takes_names_what_the_agents_accept_and_who_is_missing(tmp_path: Path) -> None:
    """The agents' own cards, with informal modes (`text`, `image`); a configured agent that never answered; a PDF."""
    from tests.gateway.conftest import agent, agents, gateway

    (tmp_path / "doc.pdf").write_bytes(b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n")
    (tmp_path / "report.txt").write_text("the lid is cracked")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the speech agent is not started
    async with agents({"notes": agent("notes", ["text"]), "eyes": agent("eyes", ["image"])}) as urls:
        config = {"agents": [*({"name": n, "url": u} for n, u in urls.items()), {"name": "speech", "url": down}]}
        async with gateway(config) as (_, url):
            code, out, err = await send_process(str(tmp_path / "doc.pdf"), "--gateway", url, "--wait", "0.5")
            ok = await send_process(str(tmp_path / "report.txt"), "--gateway", url, "--wait", "0.5")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "note: only 2 of 3 configured agents registered (not registered: speech); the gateway keeps retrying them; "
        "sending anyway",
        "error: mma2a gateway refuses the message: part 0 (application/pdf): no agent accepts it and no transform chain "
        "reaches one that does",
        "hint: notes accepts text",  # from the public cards: no admin token needed (the README's gateway has none)
        "hint: eyes accepts image",
        "hint: configured but not registered (down, or still starting: --wait SECONDS): speech"]
    assert ok[0] == 0 and ok[1].splitlines()[0] == "part 0 (text/plain) → notes [capability]", ok


async def test_send_without_credentials_to_a_gateway_with_auth_names_the_variable(tmp_path: Path) -> None:
    from tests.gateway.conftest import agent, agents, gateway

    (tmp_path / "report.txt").write_text("the lid is cracked")
    env = {k: v for k, v in os.environ.items() if k != "MMA2A_TOKEN"}
    async with agents({"analyst": agent("analyst", ["text/plain"])}) as urls:
        config = {"agents": [{"name": "analyst", "url": urls["analyst"]}],
                  "auth": {"clients": [{"name": "me", "token": "first-hour-client-token"}]}}
        async with gateway(config) as (_, url):
            none = await send_process(str(tmp_path / "report.txt"), "--gateway", url, env=env)
            wrong = await send_process(str(tmp_path / "report.txt"), "--gateway", url, "--token-env", "MY_TOKEN",
                                       env={**env, "MY_TOKEN": "not-it"})
            right = await send_process(str(tmp_path / "report.txt"), "--gateway", url,
                                       env={**env, "MMA2A_TOKEN": "first-hour-client-token"})
    assert none[0] == 1 and none[2].splitlines() == [
        "error: mma2a gateway answered HTTP 401: missing credentials: send Authorization: Bearer <token> or an API key header",
        "hint: the gateway wants a client credential (its auth.clients): put the token in MMA2A_TOKEN, or name another "
        "variable with --token-env NAME"]
    assert wrong[0] == 1 and wrong[2].splitlines() == [
        "error: mma2a gateway answered HTTP 401: Authorization: invalid bearer token",
        "hint: the token in MY_TOKEN is not one of the gateway's client tokens (auth.clients)"]
    assert right[0] == 0 and right[1].splitlines()[0] == "part 0 (text/plain) → analyst [capability]", right


async def test_send_to_an_agent_instead_of_the_gateway_says_nothing_was_routed(tmp_path: Path) -> None:
    from tests.gateway.conftest import agent, agents

    (tmp_path / "report.txt").write_text("the lid is cracked")
    async with agents({"analyst": agent("analyst", ["text/plain"], reply="noted")}) as urls:
        code, out, err = await send_process(str(tmp_path / "report.txt"), "--gateway", urls["analyst"])
    assert code == 0
    assert err.splitlines() == [f"note: {urls['analyst']} is not an mma2a gateway (it has no /healthz): it answered "
                                "itself, nothing was routed; point --gateway at `mma2a serve`'s address"]
