"""Capability routing by score: the specialist wins, and every decision shows every agent it considered and why."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from google.protobuf import json_format

from mma2a.agents.catalog import CATALOG
from mma2a.routing import AgentInfo, Load, SkillInfo, agent_info_from_card, build_snapshot, decide, decide_linear, parse_rules
from mma2a.routing.scoring import Considered, family_shares, lost_on
from mma2a.routing.agents import effective_skills

from .helpers import message, part

NO_RULES = parse_rules("rules: []\n")


def reference(name: str) -> AgentInfo:
    return agent_info_from_card(name, json_format.MessageToDict(CATALOG[name].card()))


def inspector() -> AgentInfo:
    """The new user's agent of docs/sdk.md: images only, declared by wildcard."""
    return agent_info_from_card("inspector", {"name": "inspector", "defaultInputModes": ["image/*"],
                                              "defaultOutputModes": ["text/plain"], "skills": []})


def route(snap: Any, *parts: Any, **kw: Any) -> Any:
    view = message(*parts, **kw)
    decision = decide(view, snap, load=kw.get("load"))
    assert decision == decide_linear(view, snap)  # the compiled engine and the reference agree, tables included
    return decision


def table(decision: Any, index: int) -> dict[str, Considered]:
    choices = decision.explanation.parts[index].capability
    return {c.agent: c for c in choices[-1].considered}


def test_the_new_users_image_agent_gets_the_photo_and_explain_shows_both_scored() -> None:
    snap = build_snapshot(NO_RULES, [reference("analyst"), inspector(), reference("speech")])
    d = route(snap, part(0, "text/plain"), part(1, "image/jpeg"), part(2, "audio/wav"))
    assert [p.agents() for p in d.parts] == [("analyst",), ("inspector",), ("speech",)]
    photo = table(d, 1)
    assert photo["inspector"] == Considered("inspector", True, "", 1.0, 0.5, None, None, False, 1.1)
    assert photo["analyst"] == Considered("analyst", True, "", 0.3333, 1.0, None, None, False, 0.5333)  # text, images, audio
    assert photo["speech"].accepted is False and photo["speech"].why_not.startswith("mode: its card accepts audio/wav")
    assert [c.agent for c in d.explanation.parts[1].capability[-1].considered][:2] == ["inspector", "analyst"]
    assert d.explanation.parts[1].capability[-1].runner_up() == \
        "runner-up analyst (0.53) lost to inspector (1.10): specialisation 0.33 vs 1.00"
    text = table(d, 0)  # the text: analyst is the only agent accepting it (inspector: mode)
    assert text["analyst"].accepted and not text["inspector"].accepted
    assert text["inspector"].why_not == "mode: its card accepts image/*"
    # JSON, as /admin/explain and `rules explain --json --detail` show it
    shown = d.to_json(detail=True)["explanation"]["parts"][1]["capability"][-1]
    assert shown["chosen"] == "inspector"
    assert shown["agents"][0] == {"agent": "inspector", "accepted": True, "total": 1.1, "specialisation": 1.0, "fit": 0.5}
    assert shown["agents"][1] == {"agent": "analyst", "accepted": True, "total": 0.5333, "specialisation": 0.3333,
                                  "fit": 1.0}


def test_a_specialist_beats_catch_alls_and_exact_listing_generalists() -> None:
    agents = [
        AgentInfo("anything", ("*/*",)),
        AgentInfo("generalist", ("text/plain", "image/png", "audio/wav", "application/pdf")),
        AgentInfo("images", ("image/*",)),
    ]
    snap = build_snapshot(NO_RULES, agents)
    d = route(snap, part(0, "image/png"))
    assert d.parts[0].agents() == ("images",)
    got = table(d, 0)
    assert got["anything"].specialisation == 0.0 and got["anything"].fit == 0.0  # `*/*` is nobody's specialist
    assert got["generalist"].specialisation == 0.25 and got["generalist"].fit == 1.0
    # a family nobody specialises in still goes somewhere: the exact listing before the catch-all
    assert route(snap, part(0, "audio/wav")).parts[0].agents() == ("generalist",)
    assert route(snap, part(0, "video/mp4")).parts[0].agents() == ("anything",)


def test_informal_text_card_gets_the_text_over_a_generalist_listing_it_exactly() -> None:
    chat = agent_info_from_card("chat", {"defaultInputModes": ["text"], "defaultOutputModes": ["text"], "skills": []})
    snap = build_snapshot(NO_RULES, [reference("analyst"), chat, inspector()])
    d = route(snap, part(0, "text/plain"), part(1, "image/png"))
    assert [p.agents() for p in d.parts] == [("chat",), ("inspector",)]
    assert table(d, 0)["chat"].specialisation == 1.0 and table(d, 0)["chat"].fit == 0.5


def test_specialisation_is_the_share_of_the_card_about_the_family() -> None:
    card = AgentInfo("mixed", ("text/plain",), skills=(
        SkillInfo("chat"), SkillInfo("look", ("image/png", "text/plain")), SkillInfo("any", ("*/*",))))
    shares = family_shares(effective_skills(card))
    assert shares == {"text": round((1 + 0.5) / 3, 4), "image": round(0.5 / 3, 4)}
    assert family_shares(effective_skills(AgentInfo("all", ("*/*",)))) == {}


def test_every_agent_considered_says_why_not() -> None:
    agents = [
        AgentInfo("sick", ("image/*",), healthy=False),
        AgentInfo("leaving", ("image/*",), draining=True),
        AgentInfo("texts", ("text/plain",)),
        AgentInfo("caption", ("image/*",), ("text/plain",), transformer=True),
        AgentInfo("any", ("*/*",)),
    ]
    d = route(build_snapshot(NO_RULES, agents), part(0, "image/png"))
    got = table(d, 0)
    assert d.parts[0].agents() == ("any",)
    assert got["sick"].why_not == "health: its health check fails"
    assert got["leaving"].why_not == "draining"
    assert got["texts"].why_not == "mode: its card accepts text/plain"
    assert got["caption"].accepted and got["caption"].transformer  # accepted, ranked after every other agent
    ranked = [c.agent for c in d.explanation.parts[0].capability[-1].considered]
    assert ranked == ["any", "caption", "leaving", "sick", "texts"]
    assert lost_on(got["any"], got["caption"]) == "a transformer (ranked after every other agent)"


def test_output_fit_comes_first_when_the_request_names_its_modes() -> None:
    agents = [AgentInfo("images", ("image/*",), ("application/json",)), AgentInfo("talker", ("*/*",), ("audio/wav",))]
    snap = build_snapshot(NO_RULES, agents)
    assert route(snap, part(0, "image/png")).parts[0].agents() == ("images",)
    d = route(snap, part(0, "image/png"), outputs=("audio/*",))
    assert d.parts[0].agents() == ("talker",)
    assert table(d, 0)["talker"].output == 1.0 and table(d, 0)["images"].output == 0.0


def test_equal_scores_go_to_the_least_busy_then_the_name() -> None:
    snap = build_snapshot(NO_RULES, [AgentInfo("b", ("image/*",)), AgentInfo("a", ("image/*",))])
    d = route(snap, part(0, "image/png"))
    assert d.parts[0].agents() == ("a",) and d.uses_load
    assert decide(message(part(0, "image/png")), snap, load=Load({"a": 2})).parts[0].agents() == ("b",)
    assert d.explanation.parts[0].capability[-1].runner_up() == \
        "runner-up b (1.10) lost to a (1.10): equal score: fewer requests in flight, then name"


def test_a_chain_records_the_native_attempt_and_the_choice_at_its_end() -> None:
    rules = parse_rules({"version": 1, "groups": {"readers": ["texts"]}, "default": {"capability": "readers"}, "rules": []})
    agents = [AgentInfo("asr", ("audio/*",), ("text/plain",), transformer=True), AgentInfo("texts", ("text/*",))]
    d = route(build_snapshot(rules, agents), part(0, "audio/wav"))
    assert d.parts[0].targets[0].agent == "texts" and d.parts[0].targets[0].via[0].agent == "asr"
    native, final = d.explanation.parts[0].capability
    assert (native.modality, native.chosen, final.modality, final.chosen) == ("audio/wav", "", "text/plain", "texts")
    assert native.considered[0].why_not == "mode: its card accepts text/*"


@pytest.fixture()
def embedder(minilm: Any) -> Any:
    return minilm


def words(embedder: Any, text: str, index: int = 0) -> Any:
    return dataclasses.replace(part(index, "text/plain"), embedding=embedder.embed([text])[0])


SKILLS_DEFAULT = parse_rules({"version": 1, "default": {"capability": "skills"}, "rules": []})


def card(name: str, modes: list[str], description: str) -> AgentInfo:
    return agent_info_from_card(name, {"name": name, "description": description, "defaultInputModes": modes,
                                       "skills": [{"id": name, "name": name, "description": description}]})


def test_the_request_words_decide_between_equal_specialists_and_can_overturn_specialisation(embedder: Any) -> None:
    photos = card("photos", ["image/*"], "Describes landscapes, holiday snapshots and family photos.")
    accounts = card("accounts", ["text/plain", "image/png", "application/pdf"],
                    "Checks invoices, receipts and bills: totals, taxes, due dates and payment terms.")
    snap = build_snapshot(SKILLS_DEFAULT, [photos, accounts], embedder=embedder)
    invoice = route(snap, words(embedder, "Is the total on this invoice correct? The tax looks wrong."), part(1, "image/png"))
    beach = route(snap, words(embedder, "What a lovely beach, where was this holiday picture taken?"), part(1, "image/png"))
    assert invoice.parts[1].agents() == ("accounts",)  # the generalist's skills match the words clearly better
    assert beach.parts[1].agents() == ("photos",)      # otherwise the specialist keeps the photo
    got = table(invoice, 1)
    assert got["accounts"].skills is not None and got["photos"].skills is not None
    assert got["accounts"].skills - got["photos"].skills > 0.2  # "clearly": more than the specialisation it lacks
    assert invoice.explanation.parts[1].capability[-1].runner_up().startswith("runner-up photos (")
    assert "lost to accounts" in invoice.explanation.parts[1].capability[-1].runner_up()


def test_a_document_agent_whose_skills_say_invoices_gets_the_invoice_pdf_over_a_catch_all(embedder: Any) -> None:
    anything = card("anything", ["*/*"], "A general assistant: chat, questions, files of any kind.")
    # declares its input the informal way: `file` reads as every type, so only its words set it apart
    invoices = card("invoices", ["file", "text"], "Extracts vendor, line items, totals and taxes from invoices.")
    snap = build_snapshot(SKILLS_DEFAULT, [anything, invoices], embedder=embedder)
    d = route(snap, words(embedder, "Please book this invoice from ACME for March."), part(1, "application/pdf"))
    assert d.parts[1].agents() == ("invoices",)
    got = table(d, 1)
    assert got["invoices"].specialisation == got["anything"].specialisation == 0.0
    assert got["invoices"].skills > got["anything"].skills
    # without words the two tie and the name decides: the words are what made the choice
    assert route(snap, part(1, "application/pdf")).parts[0].agents() == ("anything",)
    # a document agent that lists PDFs needs no words to win over the catch-all
    pdfs = card("pdf-reader", ["application/pdf", "text/plain"], "Reads PDF documents.")
    snap = build_snapshot(NO_RULES, [anything, pdfs])
    assert route(snap, part(0, "application/pdf")).parts[0].agents() == ("pdf-reader",)


def test_a_client_limited_to_some_agents_is_routed_among_them() -> None:
    snap = build_snapshot(NO_RULES, [reference("analyst"), inspector()])
    view = dataclasses.replace(message(part(0, "image/png")), allowed=frozenset({"analyst"}))
    d = decide(view, snap)
    assert d == decide_linear(view, snap)
    assert d.parts[0].agents() == ("analyst",)  # not the better-scored inspector, which this client may not use
    got = table(d, 0)
    assert got["inspector"].why_not == "client not allowed (auth.clients[].agents)"
    assert d.explanation.parts[0].capability[-1].runner_up() is None  # nobody the client may use came second
    assert route(snap, part(0, "image/png")).parts[0].agents() == ("inspector",)  # the same part, another client



def test_a_card_description_naming_content_is_a_skills_text() -> None:
    from mma2a.routing.semantic import skill_texts

    def texts(description: str, skill: str = "Extracts totals") -> list[tuple[str, str]]:
        card = {"description": description, "skills": [{"id": "s", "name": "s", "description": skill}]}
        return skill_texts(agent_info_from_card("a", card))

    assert texts("Reads scanned images of invoices and receipts.")[-1] == ("card", "Reads scanned images of invoices and receipts.")
    assert all(sid != "card" for sid, _ in texts("a desk"))  # names no kind of content: the skills speak for it
    assert all(sid != "card" for sid, _ in texts("Extracts totals"))  # says what a skill already says
    bare = agent_info_from_card("b", {"description": "Helps with travel plans", "skills": []})
    assert skill_texts(bare) == [("card", "Helps with travel plans")]  # no skill text at all: the card's own words
