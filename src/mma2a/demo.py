"""The embedded demo: reference agents and a gateway in one process, a scripted multimodal conversation.

Runs the same product-defect report (text + photo + voice note) natively and through the
text bottleneck, and shows where each part went, why, and what came back; asks in both modes
which alarm is sounding behind the caller (the one question of the demo whose answer is in the
sound, not the words: the evaluation's `alarm` kind); then one free-text
request routed by meaning (`capability: skills`) among three desks that differ only in their
card skills, with the candidates' scores.
"""

from __future__ import annotations

import base64
import contextlib
import io
import secrets
from collections.abc import AsyncIterator, Callable
import dataclasses
from dataclasses import dataclass
from typing import Any

import httpx

from .agents.catalog import CATALOG
from .agents.runtime import ReceivedPart, SkillExecutor, make_card, run_agent
from .ext import EXTENSION_URI, MessageExtension, PartExtension, write_message, write_part
from .gateway import Gateway, parse_config
from .serving import free_port, running

DEMO_RULES = """
version: 1
default: {capability: any}
rules:
  - name: clone-photos  # to the vision inspector and the analyst
    priority: 10
    match: {modality: image/*}
    action: {clone_and_route_to: [vision, analyst]}
  - name: voice-notes-to-analyst
    match: {modality: audio/*}
    action: {route_to: analyst}
  - name: reports-to-analyst
    match: {modality: text/plain}
    action: {route_to: analyst}
"""

REPORT = ("Customer report: the lid of my coffee machine cracked after one week and now it makes a rattle; "
          "photo of the unit's label and a voice note attached. "
          "Question: what should we do, and for which serial number?")
VOICE = "the left hinge is cracked and it makes a rattle and please replace it"
SERIAL = "SN-20417"
DEMO_AGENT_TIMEOUT_S = 300.0
"""How long the demo's gateway waits for a reference agent: they load their models on the first message."""
ALARM_QUESTION = ("The same caller left this voice note from the plant floor; an alarm may be sounding behind them. "
                  "Question: which alarm is sounding: beeping, a siren, or none? Answer beep, siren or none.")
ALARM_HZ = 3100.0
"""The smoke alarm's beeps behind the voice note of the alarm question (on 0.15 s of every 0.5 s, 10 dB under the
speech): the kind of question docs/evaluation.md measured native routing and the text bottleneck to differ on."""
FIELD_REPORT = ("Field report from pump station 4: the pump stopped with a fault; panel photo attached. The manual says: "
                "the status lights are, from left to right: power, network, storage and cooling; a red light marks the fault.")


def defect_photo() -> bytes:
    """A product photo: a grey lid with a dark crack near its left hinge and a QR label (drawn, 640x480 PNG)."""
    import random

    from .eval.media import Label, Mark, product_photo

    return product_photo(random.Random(0), (170, 172, 176), [Mark("crack", 120, 250)], [Label(SERIAL, 420, 200)])


def panel_photo() -> bytes:
    """A field photo: a device panel whose third of four status lights is red (drawn, 640x360 PNG)."""
    import random

    from .eval.media import status_panel

    green, red = (40, 200, 70), (232, 40, 35)
    return status_panel(random.Random(0), [green, green, red, green])


def alarm_voice(voice: bytes) -> bytes:
    """The voice note with a smoke alarm beeping behind it (`ALARM_HZ`), as the evaluation's `alarm` tasks are made."""
    import random

    from .eval.media import Sound, Utterance, Voice, in_room

    beeps = Sound("beep", ALARM_HZ, -10.0, period_s=0.5, on_s=0.15)
    return in_room(voice, Utterance(VOICE, Voice("demo", "en-us", 140), sound=beeps), random.Random(0))


def alarm_message(voice: bytes) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [
        {"text": ALARM_QUESTION, "mediaType": "text/plain"},
        write_part({"raw": base64.b64encode(voice).decode(), "mediaType": "audio/wav", "filename": "floor.wav"},
                   PartExtension(modality="audio/wav", encoding="base64"))]
    return write_message({"messageId": "demo-alarm", "role": "ROLE_USER", "parts": parts}, MessageExtension(intent="auto"))


@dataclass
class AlarmAnswer:
    """The analyst's answer to the alarm question in one routing mode, and how the voice note reached it."""

    answer: str
    via: str


def alarm_answer(task: dict[str, Any]) -> AlarmAnswer:
    rows = [r for r in rows_of(task) if r.modality.startswith("audio/")]
    answer = ""
    for art in task.get("artifacts") or []:
        for part in art.get("parts") or []:
            data = part.get("data")
            if isinstance(data, dict) and isinstance(data.get("answer"), str):
                answer = data["answer"]
    return AlarmAnswer(answer or f"no answer: task {task_outcome(task)}", rows[0].via if rows else "not routed")


def demo_message(photo: bytes, voice: bytes | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": REPORT, "mediaType": "text/plain"}]
    parts.append(write_part({"raw": base64.b64encode(photo).decode(), "mediaType": "image/png", "filename": "lid.png"},
                            PartExtension(modality="image/png", encoding="base64", features={"width": 640, "height": 480})))
    if voice is not None:
        parts.append(write_part({"raw": base64.b64encode(voice).decode(), "mediaType": "audio/wav", "filename": "note.wav"},
                                PartExtension(modality="audio/wav", encoding="base64")))
    msg: dict[str, Any] = {"messageId": "demo-defect-report", "role": "ROLE_USER", "parts": parts}
    return write_message(msg, MessageExtension(intent="auto", priority=7))


@dataclass
class DemoRow:
    part: int
    modality: str
    why: str
    target: str
    via: str
    answer: str


@contextlib.asynccontextmanager
async def demo_network(mode: str = "native", agent_timeout_s: float | None = None) -> AsyncIterator[tuple[Gateway, str]]:
    """Every reference agent and a gateway in front of them, on free loopback ports; the gateway waits
    `agent_timeout_s` (default `DEMO_AGENT_TIMEOUT_S`) for each agent."""
    async with contextlib.AsyncExitStack() as stack:
        agents = []
        port = free_port()  # the agents read payload URLs of this gateway only (the SDK's SSRF guard)
        for ref in CATALOG.values():
            executor = SkillExecutor(ref.reply, gateway=f"http://127.0.0.1:{port}")
            url = await stack.enter_async_context(run_agent(ref.card(), executor))
            agents.append({"name": ref.name, "url": url, "transformer": ref.transformer})
        # the agents run real models in this process, and the first message loads them: under load a cold inspection
        # of the photo alone took 53 s (load 26), past the default 30 s agent timeout (the demo then showed no answer)
        gw = Gateway(parse_config({"listen": f"127.0.0.1:{port}", "rules": DEMO_RULES, "mode": mode, "agents": agents,
                                   "timeout_s": agent_timeout_s or DEMO_AGENT_TIMEOUT_S, "log_decisions": False, "admin": {"token_env": None},
                                   "history": {"enabled": False}}))  # a throwaway gateway: nothing to keep
        url = await stack.enter_async_context(running(gw.app, "127.0.0.1", port))
        yield gw, url


def rows_of(task: dict[str, Any]) -> list[DemoRow]:
    meta = (task.get("metadata") or {}).get(EXTENSION_URI) or {}
    answers: dict[str, list[str]] = {}
    for art in task.get("artifacts") or []:
        source = ((art.get("metadata") or {}).get(EXTENSION_URI) or {}).get("source") or art.get("name", "").split("/")[0]
        answers.setdefault(source, []).extend(p["text"] for p in art.get("parts", []) if "text" in p)
    missing = _missing_answers(task)
    rows = []
    for r in meta.get("route", []):
        for target, via in zip(r["targets"], r["via"]):
            why = ("rule " + ", ".join(r["matched"])) if r["matched"] else "capability (Agent Card accepts it)"
            chain = " → ".join(f"{s['agent']} ({s['from']}→{s['to']})" for s in via) or "native"
            label = ""
            if r["bottleneck"]:  # a rule's own transform is a choice, not the fallback
                label = " [to text by rule]" if any(a.startswith("transform:") for a in r["actions"]) else " [text bottleneck]"
            rows.append(DemoRow(int(r["index"]), r["modality"], why, target, chain + label,
                                " | ".join(answers.get(target, [])) or missing[target]))
    return rows


def _missing_answers(task: dict[str, Any]) -> dict[str, str]:
    """Why an agent gave no answer, by agent, from the gateway's task: the leg's state and the gateway's reason
    for it (`vision: agent vision timed out after 30 s`), or, for an agent the task never reached (a transform
    before it failed), the task's outcome — a missing answer is said to be missing and why, never shown as `-`."""
    status_msg = (task.get("status") or {}).get("message") or {}
    reasons = " ".join(p.get("text", "") for p in status_msg.get("parts") or [] if "text" in p)
    meta = (task.get("metadata") or {}).get(EXTENSION_URI) or {}
    outcome = task_outcome(task)
    out: dict[str, str] = {}
    for r in meta.get("route") or []:
        for target in r.get("targets") or []:
            out[target] = ("no answer (the agent replied without text)" if outcome == "completed"
                           else f"no answer: not reached, task {outcome}")
    for leg in meta.get("downstream") or []:
        agent, state = str(leg.get("agent", "")), str(leg.get("state", "")).removeprefix("TASK_STATE_").lower()
        said = next((seg for seg in reasons.split("; ") if seg.startswith(f"{agent}: ")), "")
        out[agent] = f"no answer: {state}" + (f" ({said.removeprefix(agent + ': ')})" if said else "")
    return out


@dataclass
class FieldResult:
    """The field report's reply: the image analysis, the summary that was spoken, and the audio the speaker made;
    `problem` says what is missing from the reply and why (empty when nothing is)."""

    route: list[DemoRow]
    analysis: dict[str, Any]
    summary: str
    audio: bytes
    audio_path: str
    spoken_by: str
    problem: str = ""


def wav_seconds(data: bytes) -> float:
    import wave

    with wave.open(io.BytesIO(data)) as w:
        frames: int = w.getnframes()
        rate: int = w.getframerate()
        return frames / rate


def task_outcome(task: dict[str, Any]) -> str:
    """`completed`, or the task's state with the gateway's reasons (`failed (vision: agent vision timed out after 300 s)`)."""
    state = str((task.get("status") or {}).get("state", "")).removeprefix("TASK_STATE_").lower() or "no state"
    if state == "completed":
        return state
    said = " ".join(p.get("text", "") for p in ((task.get("status") or {}).get("message") or {}).get("parts") or []
                    if "text" in p).strip()
    return f"{state} ({said})" if said else state


async def _send(url: str, message: dict[str, Any], accepted: list[str] | None = None) -> dict[str, Any]:
    """One message through the gateway with the a2a-sdk client; the final task in JSON form."""
    from a2a.client import ClientConfig, create_client
    from a2a.types import SendMessageRequest
    from google.protobuf import json_format

    body: dict[str, Any] = {"message": message}
    if accepted:
        body["configuration"] = {"acceptedOutputModes": accepted}
    async with httpx.AsyncClient(timeout=DEMO_AGENT_TIMEOUT_S + 30) as http:  # the gateway answers first, if late
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        events = [ev async for ev in client.send_message(json_format.ParseDict(body, SendMessageRequest()))]
    return dict(json_format.MessageToDict(events[-1].task))


async def field_report(url: str, out_dir: str) -> FieldResult:
    """Text + panel photo to the analyst; the client accepts audio and JSON, so the summary comes back spoken."""
    photo = panel_photo()
    parts: list[dict[str, Any]] = [{"text": FIELD_REPORT, "mediaType": "text/plain"},
                                   write_part({"raw": base64.b64encode(photo).decode(), "mediaType": "image/png",
                                               "filename": "panel.png"}, PartExtension(modality="image/png", encoding="base64"))]
    msg = write_message({"messageId": "demo-field-report", "role": "ROLE_USER", "parts": parts}, MessageExtension(intent="auto"))
    task = await _send(url.rstrip("/") + "/agents/analyst/", msg, ["audio/wav", "application/json"])
    return field_result(task, out_dir)


def field_result(task: dict[str, Any], out_dir: str) -> FieldResult:
    """The field report's task read: the analysis (JSON), the spoken summary (WAV, saved in `out_dir`), and what is
    missing and why — a late or failed agent gives a stated problem, never an empty figure."""
    import os
    import wave

    analysis: dict[str, Any] = {}
    audio, spoken_by = b"", ""
    for art in task.get("artifacts") or []:
        for p in art.get("parts") or []:
            if isinstance(p.get("data"), dict):
                analysis = p["data"]
            elif p.get("mediaType") == "audio/wav" and "raw" in p:
                audio = base64.b64decode(p["raw"])
                spoken_by = ((p.get("metadata") or {}).get(EXTENSION_URI) or {}).get("transformedFrom", {}).get("agent", "")
    missing = []
    if not analysis:
        missing.append("no image analysis")
    if audio:
        try:
            wav_seconds(audio)
        except (wave.Error, EOFError) as exc:
            missing.append(f"the spoken summary is not a readable WAV ({exc})")
            audio = b""
    else:
        missing.append("no spoken summary")
    path = os.path.join(out_dir, "field-summary.wav")
    if audio:
        with open(path, "wb") as fh:
            fh.write(audio)
    problem = " and ".join(missing) + f" in the reply: task {task_outcome(task)}" if missing else ""
    return FieldResult(rows_of(task), analysis, str(analysis.get("summary", "")), audio, path if audio else "",
                       spoken_by, problem)


DESKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "billing-desk": ("Billing and refunds", "Answers questions about invoices, charges, payments and refunds.",
                     ("Why was I charged twice?", "I want my money back")),
    "delivery-desk": ("Delivery tracking", "Tracks parcels and deliveries: where an order is, when the courier comes, "
                      "lost packages.", ("Where is my package?", "The courier never came")),
    "it-desk": ("IT helpdesk", "Fixes computer problems: passwords and logins, laptops, VPN and email.",
                ("I can't log in to my account", "My laptop won't turn on")),
}
FREE_TEXT = "Hi, the box I ordered last week still hasn't shown up and the tracking page says nothing."
SKILLS_RULES = "version: 1\ndefault: {capability: skills}\nrules: []\n"  # the sentence model's own score and min


@dataclass
class SkillsResult:
    """A free-text request routed by skills: where it went, the gateway's note with the candidates' scores, the answer."""

    text: str
    target: str
    reason: str
    note: str
    answer: str


def desk_card(name: str) -> Any:
    title, description, examples = DESKS[name]
    skill = title.lower().replace(" and ", "-").replace(" ", "-")  # "delivery-tracking"
    card = make_card(name, description, input_modes=["text/plain"], output_modes=["text/plain"], skill=skill)
    card.skills[0].name = title
    card.skills[0].examples.extend(examples)
    return card


def desk_reply(name: str) -> Any:
    async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
        text = " ".join(p.text for p in parts if p.text is not None)
        return [{"text": f"{name}: ticket opened for {text!r}"}]
    return reply


async def skills_request(text: str = FREE_TEXT, progress: Callable[[str], None] | None = None) -> SkillsResult | None:
    """`text` to a gateway whose default is `capability: skills`, in front of the three desks (None without the
    `embed` extra): the dry-run explanation's skills note, then the real send and the desk's answer."""
    from .features.text_models import embedding_available

    if not embedding_available():
        return None
    if progress is not None:
        progress(f"skills routing: starting {len(DESKS)} desks and a gateway, sending a free-text request")
    async with contextlib.AsyncExitStack() as stack:
        agents = [{"name": name, "url": await stack.enter_async_context(run_agent(desk_card(name), SkillExecutor(desk_reply(name))))}
                  for name in DESKS]
        port, token = free_port(), secrets.token_urlsafe(16)  # the dry run is an admin call
        gw = Gateway(parse_config({"listen": f"127.0.0.1:{port}", "rules": SKILLS_RULES, "agents": agents,
                                   "log_decisions": False, "admin": {"token": token}, "history": {"enabled": False},
                                   "features": {"budget_s": DEMO_AGENT_TIMEOUT_S}}))  # the sentence model loads cold
        url = await stack.enter_async_context(running(gw.app, "127.0.0.1", port))
        message = {"messageId": "demo-free-text", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}
        async with httpx.AsyncClient(timeout=DEMO_AGENT_TIMEOUT_S + 30) as http:
            resp = await http.post(url.rstrip("/") + "/admin/explain", json={"message": message},
                                   headers={"Authorization": f"Bearer {token}"})
        reason, note = _explained(resp)
        task = await _send(url, message)
    route: dict[str, Any] = next(iter(((task.get("metadata") or {}).get(EXTENSION_URI) or {}).get("route") or []), {})
    target = ", ".join(route.get("targets") or []) or f"not routed: {task_outcome(task)}"
    answer = " | ".join(p["text"] for art in task.get("artifacts") or [] for p in art.get("parts", []) if "text" in p)
    return SkillsResult(text, target, reason, note, answer or f"no answer: {task_outcome(task)}")


def _explained(resp: httpx.Response) -> tuple[str, str]:
    """The dry run's reason for its route (`skills:0.37`) and its `skills: ...` note (the candidates and their
    scores); or, for each, why there is none."""
    try:
        body = resp.json() if resp.status_code == 200 else None
        routes, notes = (body["parts"][0]["routes"], body["explanation"]["parts"][0]["notes"]) if body else ([], None)
    except (ValueError, KeyError, IndexError, TypeError):
        routes, notes = [], None
    if notes is None:
        why = f"no explanation (the gateway's /admin/explain answered HTTP {resp.status_code}: {resp.text[:200]})"
        return why, why
    reason = (str(routes[0].get("reason") or "") if routes else "") or "no reason in the explanation"
    note = next((n for n in notes if n.startswith("skills: ")), "")
    return reason, note or "no skills note in the explanation (notes: " + ("; ".join(notes) or "none") + ")"


@dataclass
class DemoResult:
    """Each step's outcome; `problems` says, step by step, what did not come back and why (empty: everything did)."""

    defect: dict[str, list[DemoRow]]
    field: FieldResult | None
    skills: SkillsResult | None = None
    alarm: dict[str, AlarmAnswer] = dataclasses.field(default_factory=dict)
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)


def _failure(step: str, exc: Exception) -> str:
    said = getattr(exc, "message", None) or str(exc) or "no message"
    return f"{step}: {type(exc).__name__}: {said}"


async def run_demo(*, modes: tuple[str, ...] = ("native", "text-bottleneck"), out_dir: str | None = None,
                   agent_timeout_s: float | None = None, progress: Callable[[str], None] | None = None) -> DemoResult:
    """The scripted defect report through a gateway in each mode, then the field report (native) and the free-text
    request routed by skills. A step that fails (an agent late past its timeout, an error) is recorded in
    `problems` with its reason and the demo goes on to the next."""
    import tempfile

    photo = defect_photo()
    try:
        from .agents.speech import synthesize

        voice: bytes | None = synthesize(VOICE)
    except (ImportError, OSError):
        voice = None
    say = progress or (lambda line: None)
    result = DemoResult({}, None)
    for mode in modes:
        say(f"{mode} routing: starting {len(CATALOG)} reference agents and a gateway, sending the defect report"
            + (" (the first message loads the models)" if mode == modes[0] else ""))
        async with demo_network(mode, agent_timeout_s) as (gw, url):
            try:
                task = await _send(url, demo_message(photo, voice))
            except Exception as exc:  # noqa: BLE001 - the demo says what failed and goes on
                result.defect[mode] = []
                result.problems.append(_failure(f"defect report ({mode})", exc))
            else:
                result.defect[mode] = rows_of(task)
                result.outcomes[mode] = task_outcome(task)
                if result.outcomes[mode] != "completed":  # one line for the task, not one per row it left unanswered
                    result.problems.append(f"defect report ({mode}): task {result.outcomes[mode]}")
                else:
                    result.problems.extend(f"defect report ({mode}): part {r.part} to {r.target}: {r.answer}"
                                           for r in result.defect[mode] if r.answer.startswith("no answer"))
            if voice is not None:
                say(f"{mode} routing: asking which alarm is sounding behind the caller")
                try:
                    result.alarm[mode] = alarm_answer(await _send(url.rstrip("/") + "/agents/analyst/",
                                                                  alarm_message(alarm_voice(voice))))
                except Exception as exc:  # noqa: BLE001
                    result.problems.append(_failure(f"alarm question ({mode})", exc))
                else:
                    if result.alarm[mode].answer.startswith("no answer"):
                        result.problems.append(f"alarm question ({mode}): {result.alarm[mode].answer}")
            if mode == "native" and voice is not None:
                say("native routing: sending the field report (the reply comes back spoken)")
                try:
                    result.field = await field_report(url, out_dir or tempfile.mkdtemp(prefix="mma2a-demo-"))
                except Exception as exc:  # noqa: BLE001
                    result.problems.append(_failure("field report", exc))
                else:
                    if result.field.problem:
                        result.problems.append(f"field report: {result.field.problem}")
    try:
        result.skills = await skills_request(progress=say)
    except Exception as exc:  # noqa: BLE001
        result.problems.append(_failure("free-text request", exc))
    return result
