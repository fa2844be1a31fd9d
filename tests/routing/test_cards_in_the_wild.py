"""Thirty real Agent Cards (tests/data/cards/, each with the repository it came from) and a fixed set of messages:
each part must go where a person reading the cards would send it, for the reason written beside it.

The gateway routes by `capability: skills` (the default a gateway with skills routing has): a text part goes to the
agent whose skills are nearest its words; any other part to the best-scored agent accepting it, its score including
how near the agent's skills are to the message's words (docs/rules.md, "Capability routing").
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mma2a.errors import ContentTypeNotSupported
from mma2a.routing import AgentInfo, agent_info_from_card, build_snapshot, decide, decide_linear, parse_rules

from .helpers import message, part

CARDS = Path(__file__).resolve().parents[1] / "data" / "cards"
SKILLS = parse_rules({"version": 1, "default": {"capability": "skills"}, "rules": []})


def real_cards() -> list[AgentInfo]:
    out = []
    for path in sorted(CARDS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        out.append(agent_info_from_card(path.stem, data["card"], lenient=True))
    return out


def test_the_cards_are_real_and_say_where_they_came_from() -> None:
    files = sorted(CARDS.glob("*.json"))
    assert len(files) >= 30
    repos = set()
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        source = data["source"]
        assert source["repo"].count("/") == 1 and source["path"] and len(source["commit"]) == 40, path.name
        repos.add(source["repo"])
        assert set(data["card"]) <= {"name", "description", "defaultInputModes", "defaultOutputModes", "skills"}, path.name
        problems = agent_info_from_card(path.stem, data["card"], lenient=True).problems
        # the one field real cards wrote that is no media type: the JS Eliza sample's `task-status` output mode,
        # left out of what the gateway reads (the agent stays routable)
        assert all("'task-status' is not a media type" in p for p in problems), (path.name, problems)
    assert "a2aproject/a2a-samples" in repos and len(repos) >= 10


# (what the message carries, where a person would send it, why)
TEXT_CASES = [
    ("What is the exchange rate between USD and GBP?", "currency-agent", "the a2a-samples currency agent's own example"),
    ("Will it rain tomorrow in London?", "weather-agent", "a forecast"),
    ("Tell me a joke about cats", "dad-joke", "a joke on a topic"),
    ("Are there interactions between metformin and lisinopril?", "asha", "drug interactions: the medical agent"),
    ("Design a 4-week strength program for a beginner", "harley", "a training program: the fitness coach"),
    ("Is 7919 a prime number?", "check-prime", "primality"),
    ("Can you reimburse me $20 for my lunch with the clients?", "reimbursement-hitl", "an expense claim"),
    ("Find recent papers on graph neural networks", "research-assistant", "a literature search"),
    ("Audit my website for technical SEO issues", "seo", "an SEO audit"),
    ("Proof-read this paragraph and make it sound professional", "content-editor", "editing prose"),
    ("Classify the unread emails in my inbox", "email-triage", "inbox triage"),
    ("Which foods are rich in magnesium?", "sage", "nutrition"),
    ("Give me a fundamental analysis of Apple's last quarter", "artha", "company finance"),
    ("Review this Python function for security bugs", "code-reviewer", "code review"),
    ("Find clinical trials for type 2 diabetes near Boston", "clinical-trials", "trial search"),
    ("Plan a three-day trip to Kyoto", "sk-travel", "trip planning"),
]


@pytest.fixture(scope="module")
def wild(minilm: Any) -> Any:
    return build_snapshot(SKILLS, real_cards(), embedder=minilm)


def words(embedder: Any, text: str) -> Any:
    return dataclasses.replace(part(0, "text/plain"), embedding=embedder.embed([text])[0])


def routed(snap: Any, *parts: Any) -> Any:
    view = message(*parts)
    decision = decide(view, snap)
    assert decision == decide_linear(view, snap)
    return decision


@pytest.mark.parametrize(("text", "expected", "why"), TEXT_CASES, ids=[c[1] for c in TEXT_CASES])
def test_a_question_reaches_the_agent_whose_card_is_about_it(wild: Any, minilm: Any, text: str, expected: str, why: str) -> None:
    assert routed(wild, words(minilm, text)).parts[0].agents() == (expected,), why


def test_media_among_the_real_cards(wild: Any, minilm: Any) -> None:
    # a PNG: only the a2a-samples CrewAI image generator lists image/png (beside `text`)
    d = routed(wild, words(minilm, "Make the sky in this picture more dramatic"), part(1, "image/png"))
    assert d.parts[1].agents() == ("image-generator",)
    # a PDF: only the research assistant lists application/pdf
    assert routed(wild, words(minilm, "Summarize this paper"), part(1, "application/pdf")).parts[1].agents() == ("research-assistant",)
    # JSON data: seventeen cards take application/json; the words pick among them
    d = routed(wild, words(minilm, "Strip the bot activity from these on-chain transactions"), part(1, "application/json"))
    assert d.parts[1].agents() == ("refine",)
    d = routed(wild, words(minilm, "Narrate this script as an mp3 in a warm voice"), part(1, "application/json"))
    assert d.parts[1].agents() == ("distill-audio",)  # its card takes only JSON: the script as data, not as text
    # nobody among them takes audio or a JPEG: refused, saying so, never sent to a text agent by accident
    for modality in ("audio/wav", "image/jpeg"):
        with pytest.raises(ContentTypeNotSupported, match=r"no agent accepts it"):
            decide(message(part(0, modality)), wild)


def newcomers() -> list[AgentInfo]:
    """What a user adds beside them: an image agent declared by wildcard (docs/sdk.md), a catch-all assistant and
    an invoice reader that lists PDFs."""
    def card(name: str, modes: list[str], description: str) -> AgentInfo:
        return agent_info_from_card(name, {"name": name, "defaultInputModes": modes, "defaultOutputModes": ["text/plain"],
                                           "skills": [{"id": name, "name": name, "description": description}]})
    return [card("inspector", ["image/*"], "Inspects photos of products for damage: cracks, dents, stains."),
            card("anything", ["*/*"], "A general assistant for any question or file."),
            card("invoices", ["application/pdf", "text/plain"], "Extracts vendor, line items, totals and taxes from invoices.")]


@pytest.fixture(scope="module")
def mixed(minilm: Any) -> Any:
    return build_snapshot(SKILLS, real_cards() + newcomers(), embedder=minilm)


def test_the_specialists_a_user_adds_win_among_the_real_cards(mixed: Any, minilm: Any) -> None:
    # a photo of a product: the image specialist, over the image generator that lists image/png and the catch-all
    d = routed(mixed, words(minilm, "Is this mug damaged? There is a dark line on the rim."), part(1, "image/png"))
    assert d.parts[1].agents() == ("inspector",)
    table = {c.agent: c for c in d.explanation.parts[1].capability[-1].considered}
    assert table["image-generator"].accepted and table["anything"].accepted
    assert table["inspector"].total > table["image-generator"].total > table["anything"].total
    assert table["weather-agent"].why_not.startswith("mode: its card accepts text/plain")
    # a JPEG the real cards could not take now has a home
    assert routed(mixed, part(0, "image/jpeg")).parts[0].agents() == ("inspector",)
    # the invoice PDF: the invoice reader, over the catch-all and the research assistant (which lists PDFs too)
    d = routed(mixed, words(minilm, "Please book this invoice from ACME for March."), part(1, "application/pdf"))
    assert d.parts[1].agents() == ("invoices",)
    # a paper is still the research assistant's: its skills are about papers, the invoice reader's are not
    d = routed(mixed, words(minilm, "Summarize the key findings of this research paper"), part(1, "application/pdf"))
    assert d.parts[1].agents() == ("research-assistant",)
    # audio: only the catch-all takes it
    assert routed(mixed, part(0, "audio/wav")).parts[0].agents() == ("anything",)
    # and the questions still reach the agents of the cards they are about, not the catch-all
    for text, expected, why in TEXT_CASES[:4]:
        assert routed(mixed, words(minilm, text)).parts[0].agents() == (expected,), why
