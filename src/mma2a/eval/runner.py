"""Running the CrossModal tasks through real gateways in four arms, and scoring them.

One set of reference agents (each an a2a-sdk server on a loopback port) sits behind two
gateways, one in `native` mode and one in `text-bottleneck` mode. Every task is sent, as
one multimodal A2A message, to the reasoner's address on a gateway (`/agents/{name}/`):
the gateway decides how each part reaches that reasoner — natively when its Agent Card
accepts the part, through transformer agents (speech to text, captioning) when not, or
through text first for everything in bottleneck mode. The four arms are {native,
bottleneck} × {capable reasoner, keyword reasoner}; the tasks, agents and message bytes are
the same in all four. Arms run interleaved, task by task, so load on the machine falls on
all of them alike. Two controls send each task's report without its media to each reasoner:
what they answer right is given away by how the tasks were built, not won by perception.

The tasks come in variation sets — `development` and `development-2` (`media.SETS`, both tuned on)
and the sealed `heldout` (`heldout.HELDOUT`, imported by this module only) — run by the same agents
in one network (models load once per run) and reported separately:
`{"sets": {"development": S, "heldout": S}, ...}` by default.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from ..agents.catalog import CATALOG
from ..agents.chat import ChatReasoner, ChatReasonerConfig
from ..agents.questions import normalize
from ..agents.runtime import ReplyFn, SkillExecutor, run_agent
from ..errors import InvalidParams
from ..ext import EXTENSION_URI, MessageExtension, PartExtension, write_message, write_part
from ..gateway import Gateway, parse_config
from ..serving import free_port, running
from . import heldout, stats
from .media import SETS as DEVELOPMENT_SETS
from .media import VariationSet
from .tasks import SIGNAL_KINDS, CrossModalTask, generate_tasks

VARIATION_SETS: dict[str, VariationSet] = {**DEVELOPMENT_SETS, heldout.HELDOUT.name: heldout.HELDOUT}
SETS = tuple(VARIATION_SETS)
"""Every set by name; the sealed held-out set is read here and nowhere else (tests/eval/test_sealed.py)."""
DEFAULT_SETS = ("development", "heldout")
"""What `mma2a eval crossmodal` runs unless `--set` names one."""

ARMS: dict[str, tuple[str, str]] = {
    "native": ("native", "capable"),
    "bottleneck": ("text-bottleneck", "capable"),
    "keyword_native": ("native", "keyword"),
    "keyword_bottleneck": ("text-bottleneck", "keyword"),
}
"""arm → (gateway routing mode, reasoner)."""

CONTROLS: dict[str, tuple[str, str]] = {
    "report_only": ("native", "capable"),
    "keyword_report_only": ("native", "keyword"),
}
"""Controls: each task with its photo and voice note withheld (the report's text alone), to each reasoner. What a
reasoner answers right from them is given away by how the tasks were built (a place the report states, a default
guess that happens to be right), not won by perception or routing."""

ACCEPTED_OUTPUTS = ["text/plain", "application/json"]


@dataclass
class TaskResult:
    task: str
    category: str
    kind: str
    arm: str
    gold: str
    answer: str | None
    correct: bool
    latency_ms: float
    paths: list[str]
    error: str | None = None
    conditions: tuple[str, ...] = ()


@dataclass
class EvalNetwork:
    gateways: dict[str, str]
    reasoners: dict[str, str]


def task_message(task: CrossModalTask, message_id: str) -> dict[str, Any]:
    """The task as one A2A 1.0 message (JSON form): the report, then the photo, then the voice note."""
    parts: list[dict[str, Any]] = [{"text": task.text, "mediaType": "text/plain"}]
    for media in (task.image, task.audio):
        if media is not None:
            parts.append(write_part({"raw": base64.b64encode(media.data).decode("ascii"), "mediaType": media.media_type,
                                     "filename": media.filename},
                                    PartExtension(modality=media.media_type, encoding="base64")))
    msg: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": parts}
    return write_message(msg, MessageExtension(intent="auto"))


def answer_of(result: dict[str, Any]) -> tuple[str | None, str | None]:
    """(answer, error) from a SendMessage result: the `answer` of a data part, else the first text."""
    task = result.get("task")
    if task is None:
        return None, "the gateway answered without a task"
    status = task.get("status") or {}
    if status.get("state") != "TASK_STATE_COMPLETED":
        why = " ".join(p.get("text", "") for p in (status.get("message") or {}).get("parts", []))
        return None, f"{status.get('state')}: {why}".strip()
    texts = []
    for art in task.get("artifacts") or []:
        for part in art.get("parts") or []:
            data = part.get("data")
            if isinstance(data, dict) and isinstance(data.get("answer"), str):
                return data["answer"], None
            if "text" in part:
                texts.append(part["text"])
    return (texts[0], None) if texts else (None, "no answer part")


def paths_of(result: dict[str, Any]) -> list[str]:
    """How each part travelled: "native" or the chain of transformer agents."""
    route = (((result.get("task") or {}).get("metadata") or {}).get(EXTENSION_URI) or {}).get("route") or []
    out = []
    for r in route:
        for via in r.get("via") or [[]]:
            out.append(f"{r['modality'].split(';')[0]}:" + ("native" if not via else ">".join(s["agent"] for s in via)))
    return out


@contextlib.asynccontextmanager
async def eval_network(llm: ChatReasonerConfig | None = None) -> AsyncIterator[EvalNetwork]:
    """The reference agents (plus the chat reasoner when configured) behind a native and a bottleneck gateway."""
    async with contextlib.AsyncExitStack() as stack:
        agents = []
        replies: list[tuple[str, Callable[[], Any], ReplyFn, bool]] = [
            (r.name, r.card, r.reply, r.transformer) for r in CATALOG.values()]
        capable = "analyst"
        if llm is not None:
            chat = ChatReasoner(llm)
            replies.append((chat.name, chat.card, chat.reply, False))
            capable = chat.name
        ports = {mode: free_port() for mode in ("native", "text-bottleneck")}
        own = [f"http://127.0.0.1:{p}" for p in ports.values()]  # the only payload URLs the agents may read
        for name, card, reply, transformer in replies:
            url = await stack.enter_async_context(run_agent(card(), SkillExecutor(reply, gateway=own)))
            agents.append({"name": name, "url": url, "transformer": transformer})
        gateways = {}
        for mode, port in ports.items():
            gw = Gateway(parse_config({"listen": f"127.0.0.1:{port}", "mode": mode, "agents": agents, "log_decisions": False,
                                       "admin": {"token_env": None}, "timeout_s": 120,
                                       "history": {"enabled": False}}))  # throwaway gateways: nothing to keep
            gateways[mode] = await stack.enter_async_context(running(gw.app, "127.0.0.1", port))
        yield EvalNetwork(gateways, {"capable": capable, "keyword": "keyword"})


async def run_task(http: httpx.AsyncClient, net: EvalNetwork, task: CrossModalTask, arm: str) -> TaskResult:
    """One task in one arm (or control: the task without its media)."""
    mode, reasoner = ARMS[arm] if arm in ARMS else CONTROLS[arm]
    if arm in CONTROLS:
        task = dataclasses.replace(task, image=None, audio=None)
    url = f"{net.gateways[mode]}/agents/{net.reasoners[reasoner]}/"
    body = {"jsonrpc": "2.0", "id": f"{task.id}/{arm}", "method": "SendMessage",
            "params": {"message": task_message(task, f"{task.id}-{arm}"),
                       "configuration": {"acceptedOutputModes": ACCEPTED_OUTPUTS}}}
    t0 = time.perf_counter()
    resp = await http.post(url, json=body, headers={"A2A-Version": "1.0", "A2A-Extensions": EXTENSION_URI})
    latency = (time.perf_counter() - t0) * 1000
    payload = resp.json()
    answer: str | None
    error: str | None
    paths: list[str]
    if "error" in payload:
        answer, error, paths = None, f"JSON-RPC {payload['error'].get('code')}: {payload['error'].get('message')}", []
    else:
        answer, error = answer_of(payload["result"])
        paths = paths_of(payload["result"])
    correct = answer is not None and normalize(answer) == normalize(task.gold)
    return TaskResult(task.id, task.category, task.kind, arm, task.gold, answer, correct, round(latency, 2), paths, error,
                      task.conditions)


async def run_crossmodal(n: int = 50, seed: int = 7, *, sets: tuple[str, ...] = DEFAULT_SETS,
                         llm: ChatReasonerConfig | None = None,
                         progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Generate `n` tasks per variation set, run all four arms on each, return the full report:
    `{"sets": {name: summarize(...)}, "tasks": n, "seed": seed, "reasoner": ...}`."""
    unknown = [s for s in sets if s not in SETS]
    if unknown or not sets:
        raise InvalidParams(f"set: must be among {', '.join(SETS)}, got {', '.join(unknown) or 'none'}", field="set")
    task_sets = {name: generate_tasks(n, seed, variation_set=VARIATION_SETS[name]) for name in sets}
    out: dict[str, Any] = {}
    async with eval_network(llm) as net, httpx.AsyncClient(timeout=300) as http:
        arms = list(ARMS)
        first = task_sets[sets[0]][0]
        for arm in arms:  # warm-up: connections, recogniser and detector start-up; not scored
            await run_task(http, net, first, arm)
        for name, tasks in task_sets.items():
            results: list[TaskResult] = []
            for i, task in enumerate(tasks):
                order = arms[i % 4:] + arms[:i % 4]  # rotate which arm goes first
                for arm in order + list(CONTROLS):
                    results.append(await run_task(http, net, task, arm))
                if progress is not None:
                    progress(name, i + 1, len(tasks))
            out[name] = summarize(results, seed=seed)
    return {"sets": out, "tasks": n, "seed": seed, "reasoner": net.reasoners["capable"]}


def _breakdown(by_arm: dict[str, list[TaskResult]], key: Callable[[TaskResult], tuple[str, ...]]
               ) -> dict[str, dict[str, dict[str, float | int]]]:
    """Completion per arm for each group (a task can be in several, e.g. its photo's and its voice's condition)."""
    groups = sorted({g for rs in by_arm.values() for r in rs for g in key(r)})
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for g in groups:
        out[g] = {}
        for arm, rs in by_arm.items():
            hits = [r.correct for r in rs if g in key(r)]
            out[g][arm] = {"tca": round(sum(hits) / len(hits), 4) if hits else 0.0, "n": len(hits)}
    return out


def _channels(by_arm: dict[str, list[TaskResult]], seed: int) -> dict[str, dict[str, Any]]:
    """The tasks whose answer lives in the signal (`signal`: prosody, sounds, image detail) and the words-only ones
    (`words`), each with completion per arm and the capable reasoner's paired test native − bottleneck."""
    out: dict[str, dict[str, Any]] = {}
    for channel, inside in (("signal", True), ("words", False)):
        group = {arm: [r.correct for r in rs if (r.kind in SIGNAL_KINDS) == inside] for arm, rs in by_arm.items()}
        n = len(group["native"])
        if not n:
            continue
        b, c = stats.discordant(group["native"], group["bottleneck"])
        out[channel] = {"n": n, **{arm: round(sum(xs) / n, 4) for arm, xs in group.items()},
                        "delta_pp": round((sum(group["native"]) - sum(group["bottleneck"])) / n * 100, 1),
                        "ci95": list(stats.bootstrap_ci(group["native"], group["bottleneck"], seed=seed)),
                        "mcnemar_p": stats.mcnemar_exact(b, c), "discordant": [b, c]}
    return out


def summarize(results: list[TaskResult], *, seed: int) -> dict[str, Any]:
    """One set's report: per arm completion and latency, the paired tests, per category, question kind and
    variation condition; `results` per task."""
    by_arm: dict[str, list[TaskResult]] = {arm: sorted((r for r in results if r.arm == arm), key=lambda r: r.task)
                                           for arm in ARMS}
    controls = {arm: [r.correct for r in results if r.arm == arm] for arm in CONTROLS}
    ok = {arm: [r.correct for r in rs] for arm, rs in by_arm.items()}

    def tca(xs: list[bool]) -> float:
        return round(sum(xs) / len(xs), 4) if xs else 0.0

    arms = {arm: {"tca": tca(ok[arm]), "latency_ms_p50": round(stats.percentile([r.latency_ms for r in rs], 50), 1)}
            for arm, rs in by_arm.items()}
    b, c = stats.discordant(ok["native"], ok["bottleneck"])
    kb, kc = stats.discordant(ok["keyword_native"], ok["keyword_bottleneck"])
    return {
        "tasks": len(ok["native"]),
        "arms": arms,
        "delta_pp": round((arms["native"]["tca"] - arms["bottleneck"]["tca"]) * 100, 1),
        "ci95": list(stats.bootstrap_ci(ok["native"], ok["bottleneck"], seed=seed)),
        "mcnemar_p": stats.mcnemar_exact(b, c),
        "keyword_delta_pp": round((arms["keyword_native"]["tca"] - arms["keyword_bottleneck"]["tca"]) * 100, 1),
        "keyword_mcnemar_p": stats.mcnemar_exact(kb, kc),
        "keyword_ci95": list(stats.bootstrap_ci(ok["keyword_native"], ok["keyword_bottleneck"], seed=seed)),
        "discordant": {"native_only": b, "bottleneck_only": c, "keyword_native_only": kb, "keyword_bottleneck_only": kc},
        "latency_ratio": round(arms["native"]["latency_ms_p50"] / arms["bottleneck"]["latency_ms_p50"], 3)
        if arms["bottleneck"]["latency_ms_p50"] else None,
        "controls": {arm: {"tca": tca(xs), "n": len(xs)} for arm, xs in controls.items() if xs},
        "categories": _breakdown(by_arm, lambda r: (r.category,)),
        "kinds": _breakdown({**by_arm, **{arm: [r for r in results if r.arm == arm] for arm in CONTROLS}},
                            lambda r: (r.kind,)),
        "conditions": _breakdown(by_arm, lambda r: r.conditions),
        "channels": _channels(by_arm, seed),
        "results": [asdict(r) for r in sorted(results, key=lambda r: (r.task, [*ARMS, *CONTROLS].index(r.arm)))],
    }


SUMMARY_FIELDS = ("tasks", "arms", "controls", "delta_pp", "ci95", "mcnemar_p", "keyword_delta_pp",
                  "keyword_mcnemar_p", "keyword_ci95", "latency_ratio", "kinds", "channels", "conditions")
"""What `--json` prints of each set (the full report adds per-task results, categories and discordant counts)."""


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The report without per-task results: `{"sets": {name: {field: ...}}, "tasks", "seed", "reasoner"}`."""
    return {**{k: v for k, v in report.items() if k != "sets"},
            "sets": {name: {k: s[k] for k in SUMMARY_FIELDS} for name, s in report["sets"].items()}}


def outcomes(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report that must not change between runs with the same seed (all but latencies)."""
    return {name: {
        "tca": {arm: v["tca"] for arm, v in {**s["arms"], **s["controls"]}.items()},
        **{k: s[k] for k in ("delta_pp", "ci95", "mcnemar_p", "keyword_delta_pp", "keyword_mcnemar_p")},
        "answers": [(r["task"], r["arm"], r["answer"], r["correct"], r["paths"]) for r in s["results"]],
    } for name, s in report["sets"].items()}
