"""`mma2a rules check|explain`: validate a rule file, and show how it routes sample messages."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app, plural

rules_app = typer.Typer(help="Check routing rules and explain how they route messages.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(rules_app, name="rules")

OPERATOR_KEY = "x-mma2a"
"""Optional key in a card file of `--cards DIR` holding operator facts: groups, weight, transformer, healthy, draining."""


class CheckFailed(Exception):
    """What a rules command reports before exiting: one line per problem."""

    def __init__(self, lines: list[str], code: int = 1) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines, self.code = lines, code


def _fail(lines: list[str], code: int = 1) -> None:
    raise CheckFailed(lines, code)


@contextlib.contextmanager
def _reported(file: Path, as_json: bool) -> Iterator[None]:
    """Failures as lines on stderr, or with --json as `{"ok": false, "file", "errors"}` on stdout; exit 1."""
    try:
        yield
    except CheckFailed as exc:
        if as_json:
            typer.echo(json.dumps({"ok": False, "file": str(file), "errors": exc.lines}))
        else:
            for line in exc.lines:
                typer.echo(line, err=True)
        raise typer.Exit(exc.code) from None


def load_cards(directory: Path) -> list[Any]:
    """Agents from `DIR/NAME.json` Agent Cards (A2A 1.0 JSON); the file name is the agent name."""
    from ..errors import MMA2AError
    from ..routing import agent_info_from_card

    if not directory.is_dir():
        _fail([f"{directory}: not a directory of agent cards (NAME.json)"])
    agents = []
    errors = []
    for path in sorted(directory.glob("*.json")):
        try:
            card = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            errors.append(f"{path}: not a JSON agent card: {exc}")
            continue
        if not isinstance(card, dict):
            errors.append(f"{path}: not a JSON agent card: expected an object")
            continue
        extra = card.get(OPERATOR_KEY) or {}
        try:
            if not isinstance(extra, dict):
                raise ValueError(f"{OPERATOR_KEY}: must be an object")
            info = agent_info_from_card(
                path.stem,
                card,
                groups=tuple(extra.get("groups", ())),
                weight=extra.get("weight", 1.0),
                transformer=bool(extra.get("transformer", False)),
            )
            info = replace(info, healthy=bool(extra.get("healthy", True)), draining=bool(extra.get("draining", False)))
        except (MMA2AError, ValueError, TypeError) as exc:
            errors.append(f"{path}: {getattr(exc, 'message', exc)}")
            continue
        agents.append(info)
    if errors:
        _fail(errors)
    if not agents:
        _fail([f"{directory}: no agent cards (NAME.json) found"])
    return agents


def placeholder_agents(rules: Any) -> list[Any]:
    """Without cards: every agent, group or pool a rule names, as an agent accepting every modality,
    plus one transformer (`placeholder-transformer`) producing every modality a transform asks for."""
    from ..routing import AgentInfo, Transform
    from ..routing.rules import action_names

    names: dict[str, None] = {}
    outputs: dict[str, None] = {}
    for action in [r.action for r in rules.rules] + [rules.default]:
        names.update(dict.fromkeys(action_names(action)))
        while isinstance(action, Transform):
            if not action.to.is_wildcard:
                outputs[str(action.to)] = None
            action = action.then
    for group, members in rules.groups.items():
        names.update(dict.fromkeys(members))
        names.pop(group, None)
    agents = [AgentInfo(n, ("*/*",), ("*/*",)) for n in names] or [AgentInfo("any-agent", ("*/*",), ("*/*",))]
    if outputs:
        agents.append(AgentInfo("placeholder-transformer", ("*/*",), tuple(outputs), transformer=True))
    return agents


def _load(rules_path: Path) -> Any:
    from ..errors import RuleError
    from ..routing import load_rules_file

    try:
        return load_rules_file(rules_path)
    except RuleError as exc:
        _fail(exc.errors)


def _embedder(rules: Any, text_model: str = "minilm") -> Any:
    """The sentence embedder when the rules route by meaning and the `embed` extra is installed."""
    from ..features.text_models import TEXT_MODELS, sentence_embedder
    from ..routing.semantic import needs_vectors

    if text_model not in TEXT_MODELS:
        _fail([f"--text-model: {text_model!r} is not a sentence model; known: {', '.join(TEXT_MODELS)}"])
    return sentence_embedder(text_model) if needs_vectors(rules) else None


def _with_vectors(view: Any, obj: Any, snap: Any, embedder: Any) -> Any:
    """The view with the sentence vector of each part's words (text, or a transcript / OCR text the
    message carries as features), as the gateway's feature stage would add it."""
    from ..ext import read_part
    from ..gateway.stages.enrich import part_words, with_vectors

    if not snap.needs_vectors or embedder is None:
        return view
    raw = obj.get("message", obj) if isinstance(obj, dict) and "parts" not in obj else obj
    texts = {}
    for p, pv in zip(raw.get("parts") or [], view.parts):
        words = part_words(p, pv.modality, read_part(p).features) if isinstance(p, dict) else None
        if words is not None:
            texts[pv.index] = words
    return with_vectors(view, dict(zip(texts, embedder.embed(list(texts.values()))))) if texts else view


def _snapshot(rules: Any, cards: Path | None, mode: str, embedder: Any = None) -> Any:
    from ..errors import MMA2AError
    from ..routing import build_snapshot

    agents = load_cards(cards) if cards is not None else placeholder_agents(rules)
    try:
        return build_snapshot(rules, agents, mode=mode, embedder=embedder if embedder is not None else _embedder(rules))
    except MMA2AError as exc:
        _fail(list(exc.data.get("errors", [exc.message])))


@rules_app.command("check")
def check(
    rules: Annotated[Path, typer.Argument(help="The rule file (YAML or JSON).")],
    cards: Annotated[Path | None, typer.Option(help="A directory of agent cards (NAME.json): also check agent and group names.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Validate a rule file: exit 0, or 1 with every error (file:line: rule: field: problem) on stderr (--json: stdout)."""
    with _reported(rules, as_json):
        rule_set = _load(rules)
        if cards is not None:
            _snapshot(rule_set, cards, "native")
    if as_json:
        typer.echo(json.dumps({"ok": True, "file": str(rules), "rules": len(rule_set.rules), "default": rule_set.default.label()}))
    else:
        typer.echo(f"{rules}: {plural(len(rule_set.rules), 'rule')} OK (default {rule_set.default.label()})")


def _read_messages(path: Path) -> list[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail([f"{path}: cannot read: {exc}"])
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append((n, line))
    return out


def _view(obj: Any) -> Any:
    """A message line: an A2A 1.0 message, or SendMessage params (`message` + `configuration`)."""
    from ..errors import InvalidRequest
    from ..view import read_caller, view_message

    outputs: tuple[str, ...] = ()
    if isinstance(obj, dict) and "message" in obj and "parts" not in obj:
        config = obj.get("configuration") or {}
        modes = (config.get("acceptedOutputModes") or []) if isinstance(config, dict) else []
        if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
            raise InvalidRequest("configuration.acceptedOutputModes: must be a list of media types")
        outputs = tuple(modes)
        caller = read_caller(obj["client"]) if obj.get("client") is not None else None  # `client:` conditions
        return replace(view_message(obj["message"], accepted_output_modes=outputs), caller=caller)
    return view_message(obj, accepted_output_modes=outputs)


@rules_app.command("explain")
def explain(
    rules: Annotated[Path, typer.Argument(help="The rule file (YAML or JSON).")],
    messages: Annotated[Path, typer.Argument(help="JSON Lines: one A2A 1.0 message (or SendMessage params, with an "
                                                  "optional client: {id, claims} for client: conditions) per line.")],
    cards: Annotated[Path | None, typer.Option(help="A directory of agent cards (NAME.json). Without it, every agent a rule names is assumed to accept everything.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per input line.")] = False,
    mode: Annotated[str, typer.Option(help="native or text-bottleneck.")] = "native",
    all_rules: Annotated[bool, typer.Option("--all", help="Also say why every other rule did not match.")] = False,
    detail: Annotated[bool, typer.Option("--detail", help="With --json: each target's reason and the explanation "
                                                           "(candidates, scores), as /admin/explain answers.")] = False,
    text_model: Annotated[str, typer.Option(help="The sentence model that scores `semantic` and `skills` "
                                                 "(minilm, use, static, wordllama), as the gateway's features.text_model.")] = "minilm",
) -> None:
    """Route each message of MESSAGES with RULES and show the decision and its explanation."""
    from ..errors import MMA2AError, ParseError
    from ..routing import decide, explain_rules

    with _reported(rules, as_json):
        rule_set = _load(rules)
        embedder = _embedder(rule_set, text_model)
        snap = _snapshot(rule_set, cards, mode, embedder)
        lines = _read_messages(messages)
    if cards is None and not as_json:
        typer.echo(
            "note: no --cards: every agent named in the rules is assumed to accept every modality "
            "(transforms go through placeholder-transformer)",
            err=True,
        )
    failed = False
    for n, line in lines:
        message_id = None
        try:
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ParseError(f"not valid JSON: {exc}") from None
            if isinstance(obj, dict):
                raw = obj.get("message", obj) if "parts" not in obj else obj
                message_id = raw.get("messageId") if isinstance(raw, dict) else None
            view = _with_vectors(_view(obj), obj, snap, embedder)
            decision = decide(view, snap)
        except MMA2AError as exc:
            failed = True
            if as_json:
                typer.echo(json.dumps({"message_id": message_id, "line": n, "error": {"code": exc.code, "message": exc.message}}))
            else:
                typer.echo(f"{messages}:{n}: error: {exc.message}", err=True)
            continue
        if as_json:
            typer.echo(json.dumps(decision.to_json(detail=detail)))
        else:
            typer.echo(_render(decision, [explain_rules(p, snap, view.caller) for p in view.parts] if all_rules else None,
                              mode))
    if failed:
        raise typer.Exit(1)


def _bottleneck_label(route: Any, mode: str) -> str:
    """Say why a part crossed into text: a rule's own `transform` is not the fallback the paper calls the bottleneck."""
    if not route.bottleneck:
        return ""
    if any(a.startswith("transform:") for a in route.actions):
        return "  [to text by rule " + ", ".join(route.matched) + "]"
    if mode == "text-bottleneck":
        return "  [text bottleneck: mode]"
    return "  [text bottleneck: fallback, the target does not take it natively]"


def _render(decision: Any, everything: list[Any] | None, mode: str = "native") -> str:
    lines = [f"message {decision.message_id}"]
    for route, why in zip(decision.parts, decision.explanation.parts):
        lines.append(f"  part {route.index} {route.modality}" + _bottleneck_label(route, mode))
        lines.append(f"    matched: {', '.join(route.matched) if route.matched else '(none)'}")
        lines.append(f"    actions: {', '.join(route.actions)}")
        if route.dropped is not None:
            lines.append(f"    dropped: {route.dropped}")
        for t in route.targets:
            via = ""
            if t.via:
                via = " via " + " -> ".join(f"{s.agent} ({s.from_modality} -> {s.to_modality})" for s in t.via)
            lines.append(f"    -> {t.agent}{via}  [{t.reason}]")
        if route.pin_session:
            lines.append("    session: pinned")
        checks = everything[route.index] if everything is not None else why.candidates
        title = "rules" if everything is not None else f"candidates ({plural(why.skipped, 'other rule')} skipped by the index)"
        lines.append(f"    {title}:")
        for c in checks:
            lines.append(f"      {'+' if c.matched else '-'} {c.rule}" + ("" if c.matched else f": {c.reason}"))
        for note in why.notes:
            lines.append(f"    note: {note}")
        for choice in why.capability:
            lines.extend(_capability_table(choice))
    return "\n".join(lines)


def _capability_table(choice: Any) -> list[str]:
    """A capability choice as the explain text shows it: every agent considered, the chosen one marked."""
    where = f" in group {choice.group}" if choice.group else ""
    head = f"    capability for {choice.modality}{where}: " + (f"chose {choice.chosen}" if choice.chosen else "nobody accepts it")
    lines = [head]
    for c in choice.considered:
        if c.accepted:
            mark = "*" if c.agent == choice.chosen else "+"
            lines.append(f"      {mark} {c.agent} {c.total:.2f} ({c.components()})")
        else:
            lines.append(f"      - {c.agent}: {c.why_not}")
    lost = choice.runner_up()
    if lost is not None:
        lines.append(f"      {lost}")
    return lines
