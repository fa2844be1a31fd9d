"""Load and validate rule files (YAML or JSON) into a `RuleSet`.

Every problem is collected, not just the first; each message names the rule (by name, or
by index when the name itself is wrong), the field, and the line when the rules came from
text. Line numbers come from composing the YAML node tree, which also catches duplicate
keys that a plain `yaml.safe_load` would silently merge.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import InvalidModality, RuleError
from ..modality import Modality, parse_modality
from .caller import CLIENT_ID, CLIENT_PREFIX, claim_key
from .rules import (
    ON_INCOMPLETE,
    OPERATORS,
    SKILL_SCORES,
    STRATEGIES,
    Action,
    BroadcastTo,
    Capability,
    EXPLORE_DEFAULT,
    EXPLORE_MAX,
    FEEDBACK_SCOPES,
    Learn,
    Clause,
    CloneAndRouteTo,
    Condition,
    Drop,
    LoadBalance,
    RouteTo,
    Rule,
    RuleSet,
    Scalar,
    Transform,
    default_on_incomplete,
)

RULES_VERSION = 1
TOP_KEYS = ("version", "default", "groups", "rules")
RULE_KEYS = ("name", "description", "priority", "match", "action", "continue", "on_incomplete")
MATCH_KEYS = ("modality", "features", "semantic", "client", "any")
ACTION_KEYS = ("route_to", "broadcast_to", "load_balance", "transform", "drop", "clone_and_route_to", "capability",
               "learn")
ACTION_OPTIONS = {"strategy": "load_balance", "then": "transform", "min": "capability", "score": "capability"}
LEARN_KEYS = ("among", "explore", "feedback")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

Path_ = tuple[str | int, ...]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, bool))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_SYNONYMS = {
    "less": "lt", "less_than": "lt", "greater": "gt", "greater_than": "gt", "equals": "eq", "equal": "eq",
    "is": "eq", "has": "contains", "startswith": "prefix", "starts_with": "prefix", "one_of": "in",
    "present": "exists", "not_empty": "nonempty", "non_empty": "nonempty", "notempty": "nonempty", "routeto": "route_to", "route": "route_to", "broadcast": "broadcast_to",
    "clone": "clone_and_route_to", "balance": "load_balance",
}  # fmt: skip


def _hint(word: str, choices: tuple[str, ...]) -> str:
    synonym = _SYNONYMS.get(word.lower())
    if synonym in choices:
        return f"; did you mean '{synonym}'?"
    close = difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


class _LineMap:
    """Line numbers (1-based) of the nodes of a composed YAML document, by path."""

    def __init__(self) -> None:
        self.lines: dict[Path_, int] = {}
        self.duplicates: list[tuple[Path_, str, int]] = []
        self._by_rule: dict[Path_, list[tuple[Path_, int]]] | None = None

    def below(self, prefix: Path_) -> list[tuple[Path_, int]]:
        """The (path, line) of every node strictly below `prefix` (a path inside one rule, `("rules", i, ...)`),
        from an index by rule made once: scanning every node per rule made 7,000 rules take minutes to parse."""
        if self._by_rule is None:
            by: dict[Path_, list[tuple[Path_, int]]] = {}
            for p, n in self.lines.items():
                if len(p) > 2:
                    by.setdefault(p[:2], []).append((p, n))
            self._by_rule = by
        k = len(prefix)
        return [(p, n) for p, n in self._by_rule.get(prefix[:2], ()) if p[:k] == prefix and len(p) > k]

    def walk(self, node: yaml.Node, path: Path_ = ()) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                if key == "<<":
                    continue
                if key in seen:
                    self.duplicates.append((path, key, key_node.start_mark.line + 1))
                seen.add(key)
                self.lines[path + (key,)] = key_node.start_mark.line + 1
                self.walk(value_node, path + (key,))
                self.lines[path + (key,)] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.walk(item, path + (i,))

    def line(self, path: Path_) -> int | None:
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


class _Validator:
    def __init__(self, source: str, lines: _LineMap | None) -> None:
        self.source = source
        self.lines = lines
        self.errors: list[str] = []

    def error(self, path: Path_, message: str, *, rule: str | None = None, rel: int = 0) -> None:
        """Record `message` about the field at `path`; `rel` = how many leading path items are the rule's."""
        line = self.lines.line(path) if self.lines is not None else None
        where = f"{self.source}:{line}" if line is not None else self.source
        field = _dotted(path[rel:]) if rule is not None else _dotted(path)
        head = f"{where}: {rule}" if rule is not None else where
        self.errors.append(f"{head}: {field}: {message}" if field else f"{head}: {message}")


def _dotted(path: Path_) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + p
    return out


class _RuleContext:
    """Reports errors for one rule: prefixes its label and keeps paths relative to it."""

    def __init__(self, v: _Validator, base: Path_, label: str) -> None:
        self.v, self.base, self.label = v, base, label

    def error(self, rel: Path_, message: str) -> None:
        self.v.error(self.base + rel, message, rule=self.label, rel=len(self.base))


def parse_rules(document: str | Mapping[str, Any] | None, *, source: str = "<rules>") -> RuleSet:
    """Rules from YAML or JSON text, or from an already parsed document (a mapping).

    Raises `RuleError` listing every problem, each prefixed with `source` (and the line, for
    text). Text is never read as a path: `load_rules_file` reads a file.
    """
    if isinstance(document, str):
        return _parse_text(document, source)
    return _validate(document, source, None)


def load_rules_file(path: str | os.PathLike[str]) -> RuleSet:
    """Read and parse a rules file (YAML or JSON); every error names the file (and the line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuleError(f"{path}: no such rule file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read the rule file: {exc}") from None
    return _parse_text(text, str(path))


def _validate(obj: Any, source: str, _lines: _LineMap | None) -> RuleSet:
    v = _Validator(source, _lines)
    if _lines is not None:
        for path, key, line in _lines.duplicates:
            where = f"{source}:{line}"
            v.errors.append(f"{where}: {_dotted(path + (key,))}: duplicate key '{key}'")
    if obj is None:
        v.error((), "the rule file is empty; expected a mapping with a 'rules' list")
        _raise(v)
    if not isinstance(obj, dict):
        v.error((), f"the rule file must be a mapping with a 'rules' list, got {_type_name(obj)}")
        _raise(v)
    for key in obj:
        if key not in TOP_KEYS:
            v.error((str(key),), f"unknown field (expected one of {', '.join(TOP_KEYS)}){_hint(str(key), TOP_KEYS)}")
    version = obj.get("version", RULES_VERSION)
    if version != RULES_VERSION or isinstance(version, bool):
        v.error(("version",), f"unsupported rules version {version!r} (this build reads version {RULES_VERSION})")
    groups = _parse_groups(v, obj.get("groups", {}))
    default: Action = Capability()
    if "default" in obj:
        ctx = _RuleContext(v, ("default",), "default")
        parsed = _parse_action(ctx, obj["default"], ())
        if parsed is not None:
            default = parsed
    raw_rules = obj.get("rules")
    rules: list[Rule] = []
    if "rules" not in obj:
        v.error((), "missing field 'rules' (a list of rules, may be empty)")
    elif not isinstance(raw_rules, list):
        v.error(("rules",), f"must be a list of rules, got {_type_name(raw_rules)}")
    else:
        names: dict[str, int] = {}
        for i, raw in enumerate(raw_rules):
            rule = _parse_rule(v, raw, i, names)
            if rule is not None:
                rules.append(rule)
    _raise(v)
    ordered = sorted(rules, key=lambda r: (-r.priority, r.index))
    final = tuple(
        Rule(r.name, r.index, r.priority, r.clauses, r.action, r.cont, r.line, order, r.action_lines, r.on_incomplete,
             r.on_incomplete_said)
        for order, r in enumerate(ordered)
    )
    return RuleSet(final, default, groups, RULES_VERSION, source, obj)


def _raise(v: _Validator) -> None:
    if not v.errors:
        return
    first = v.errors[0]
    extra = len(v.errors) - 1
    message = first if not extra else f"{first} (and {extra} more error{'s' if extra > 1 else ''})"
    raise RuleError(message, errors=v.errors)


def _parse_groups(v: _Validator, raw: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict):
        v.error(("groups",), f"must be a mapping of group name to a list of agent names, got {_type_name(raw)}")
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for name, members in raw.items():
        if members is None:
            members = []
        if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
            v.error(("groups", str(name)), "must be a list of agent names (may be empty)")
            continue
        out[str(name)] = tuple(dict.fromkeys(members))
    return out


def _parse_rule(v: _Validator, raw: Any, i: int, names: dict[str, int]) -> Rule | None:
    base: Path_ = ("rules", i)
    if not isinstance(raw, dict):
        v.error(base, f"must be a mapping with name, match and action, got {_type_name(raw)}", rule=f"rules[{i}]", rel=2)
        return None
    name = raw.get("name")
    label = f"rule '{name}'" if isinstance(name, str) and NAME_RE.match(name) else f"rules[{i}]"
    ctx = _RuleContext(v, base, label)
    ok = True
    if "name" not in raw:
        ctx.error(("name",), "missing (every rule needs a unique name)")
        ok = False
    elif not isinstance(name, str) or not NAME_RE.match(name):
        ctx.error(
            ("name",),
            f"{name!r} is not a valid rule name (1 to 128 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit)",
        )
        ok = False
    elif name in names:
        ctx.error(("name",), f"duplicate rule name (first used by rules[{names[name]}])")
        ok = False
    else:
        names[name] = i
    for key in raw:
        if key not in RULE_KEYS:
            ctx.error((str(key),), f"unknown field (expected one of {', '.join(RULE_KEYS)}){_hint(str(key), RULE_KEYS)}")
            ok = False
    if "description" in raw and not isinstance(raw["description"], str):
        ctx.error(("description",), f"must be a string, got {_type_name(raw['description'])}")
        ok = False
    priority = raw.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        ctx.error(("priority",), f"must be an integer, got {_type_name(priority)}")
        ok = False
    cont = raw.get("continue", False)
    if not isinstance(cont, bool):
        ctx.error(("continue",), f"must be true or false, got {_type_name(cont)}")
        ok = False
    on_incomplete = raw.get("on_incomplete")
    if on_incomplete is not None and on_incomplete not in ON_INCOMPLETE:
        ctx.error(("on_incomplete",), f"must be one of {', '.join(ON_INCOMPLETE)}, got {on_incomplete!r}")
        ok = False
    clauses: tuple[Clause, ...] | None = None
    if "match" not in raw:
        ctx.error(("match",), "missing (use match: {} to match every part)")
        ok = False
    else:
        clauses = _parse_match(ctx, raw["match"])
    action: Action | None = None
    if "action" not in raw:
        ctx.error(("action",), "missing")
        ok = False
    else:
        action = _parse_action(ctx, raw["action"], ("action",))
        if isinstance(action, Drop) and cont is True:
            ctx.error(("continue",), "a drop action ends evaluation; it cannot continue")
            ok = False
    if not ok or clauses is None or action is None:
        return None
    line = v.lines.line(base) if v.lines is not None else None
    action_lines: tuple[tuple[str, int], ...] = ()
    if v.lines is not None:
        at = base + ("action",)
        action_lines = tuple(sorted((_dotted(p[len(base):]), n) for p, n in v.lines.below(at)))
    assert isinstance(name, str) and isinstance(priority, int)
    return Rule(name, i, priority, clauses, action, cont, line, 0, action_lines,
                str(on_incomplete) if on_incomplete is not None else default_on_incomplete(action), on_incomplete is not None)


def _parse_match(ctx: _RuleContext, raw: Any) -> tuple[Clause, ...] | None:
    if not isinstance(raw, dict):
        ctx.error(("match",), f"must be a mapping (modality, features, or any), got {_type_name(raw)}")
        return None
    if "any" in raw:
        others = [k for k in raw if k != "any"]
        if others:
            ctx.error(("match",), f"'any' cannot be combined with {', '.join(map(str, others))}; put them inside each 'any' entry")
            return None
        alts = raw["any"]
        if not isinstance(alts, list) or not alts:
            ctx.error(("match", "any"), "must be a non-empty list of conditions (an OR of ANDs)")
            return None
        clauses: list[Clause] = []
        for j, alt in enumerate(alts):
            if isinstance(alt, dict) and "any" in alt:
                ctx.error(("match", "any", j, "any"), "'any' cannot be nested (a rule is an OR of ANDs, two levels)")
                return None
            clause = _parse_clause(ctx, alt, ("match", "any", j))
            if clause is None:
                return None
            clauses.append(clause)
        return tuple(clauses)
    clause = _parse_clause(ctx, raw, ("match",))
    return None if clause is None else (clause,)


def _parse_clause(ctx: _RuleContext, raw: Any, path: Path_) -> Clause | None:
    if not isinstance(raw, dict):
        ctx.error(path, f"must be a mapping with modality and/or features, got {_type_name(raw)}")
        return None
    ok = True
    for key in raw:
        if key not in MATCH_KEYS:
            ctx.error(path + (str(key),), f"unknown field (expected modality, features, semantic, client or any)"
                                          f"{_hint(str(key), MATCH_KEYS)}")
            ok = False
    modality: Modality | None = None
    if "modality" in raw:
        mod = raw["modality"]
        if not isinstance(mod, str):
            ctx.error(path + ("modality",), f"must be a media type such as image/*, got {_type_name(mod)}")
            ok = False
        else:
            try:
                modality = parse_modality(mod, field="modality")
            except InvalidModality as exc:
                ctx.error(path + ("modality",), exc.message.removeprefix("modality: "))
                ok = False
    conditions: list[Condition] = []
    feats = raw.get("features", {})
    if not isinstance(feats, dict):
        ctx.error(path + ("features",), f"must be a mapping of feature name to condition, got {_type_name(feats)}")
        ok = False
    else:
        for fname, spec in feats.items():
            if str(fname).startswith(CLIENT_PREFIX):
                ctx.error(path + ("features", str(fname)), "feature names starting with 'client.' are the caller's: "
                          "write client: {id: ..., claims: {...}}")
                ok = False
                continue
            conds = _parse_conditions(ctx, str(fname), spec, path + ("features", str(fname)))
            if conds is None:
                ok = False
            else:
                conditions.extend(conds)
    if "semantic" in raw:
        cond = _parse_semantic(ctx, raw["semantic"], path + ("semantic",))
        if cond is None:
            ok = False
        else:
            conditions.append(cond)
    if "client" in raw:
        conds = _parse_client(ctx, raw["client"], path + ("client",))
        if conds is None:
            ok = False
        else:
            conditions.extend(conds)
    return Clause(modality, tuple(conditions)) if ok else None


CLIENT_KEYS = ("id", "claims")


def _parse_client(ctx: _RuleContext, raw: Any, path: Path_) -> list[Condition] | None:
    """`client: {id: [...], claims: {CLAIM: condition}}`: who is calling. `id` is a client id, a list of them (one
    of), or a feature condition; each claim (a JWT's claim, a static client's attribute) takes any condition."""
    if not isinstance(raw, dict) or not raw:
        ctx.error(path, f"must be a mapping with id and/or claims, got {_type_name(raw)}")
        return None
    ok = True
    out: list[Condition] = []
    for key in raw:
        if key not in CLIENT_KEYS:
            ctx.error(path + (str(key),), f"unknown field (expected id, claims){_hint(str(key), CLIENT_KEYS)}")
            ok = False
    if "id" in raw:
        spec = raw["id"]
        if isinstance(spec, list):
            spec = {"in": spec}
        conds = _parse_conditions(ctx, CLIENT_ID, spec, path + ("id",))
        if conds is None:
            ok = False
        else:
            out.extend(conds)
    claims = raw.get("claims", {})
    if not isinstance(claims, dict):
        ctx.error(path + ("claims",), f"must be a mapping of claim name to condition, got {_type_name(claims)}")
        ok = False
    else:
        for claim, spec in claims.items():
            conds = _parse_conditions(ctx, claim_key(str(claim)), spec, path + ("claims", str(claim)))
            if conds is None:
                ok = False
            else:
                out.extend(conds)
    return out if ok else None


SEMANTIC_KEYS = ("like", "min")


def _parse_semantic(ctx: _RuleContext, raw: Any, path: Path_) -> Condition | None:
    """`semantic: {like: [examples...], min: 0.55}`: the part's text (or transcript, or OCR text) is at
    least `min` (cosine) from its nearest example."""
    from .semantic import semantic_key

    if not isinstance(raw, dict):
        ctx.error(path, f"must be a mapping with like (a list of example texts) and min, got {_type_name(raw)}")
        return None
    ok = True
    for key in raw:
        if key not in SEMANTIC_KEYS:
            ctx.error(path + (str(key),), f"unknown field (expected like, min){_hint(str(key), SEMANTIC_KEYS)}")
            ok = False
    like = raw.get("like")
    examples: tuple[str, ...] = ()
    if not isinstance(like, list) or not like or not all(isinstance(x, str) and x.strip() for x in like):
        ctx.error(path + ("like",), "must be a non-empty list of example texts")
        ok = False
    elif len(like) > 200:
        ctx.error(path + ("like",), f"at most 200 examples, got {len(like)}")
        ok = False
    else:
        examples = tuple(" ".join(x.split()) for x in like)
    threshold = raw.get("min", 0.55)
    if not _is_number(threshold) or not -1 <= threshold <= 1:
        ctx.error(path + ("min",), f"must be a number from -1 to 1 (a cosine), got {threshold!r}")
        ok = False
    if not ok:
        return None
    return Condition(semantic_key(examples), "gte", threshold, examples=examples)


def _parse_conditions(ctx: _RuleContext, feature: str, spec: Any, path: Path_) -> list[Condition] | None:
    if not feature:
        ctx.error(path, "feature names must not be empty")
        return None
    if isinstance(spec, list):
        ctx.error(path, "a bare list is ambiguous; write {in: [...]} for one of several values")
        return None
    if not isinstance(spec, dict):
        if not _is_scalar(spec):
            ctx.error(path, f"must be a value or a mapping of operator to operand, got {_type_name(spec)}")
            return None
        return [Condition(feature, "is", spec)]
    if not spec:
        ctx.error(path, f"needs at least one operator ({', '.join(OPERATORS)})")
        return None
    out: list[Condition] = []
    ok = True
    for op, operand in spec.items():
        op = str(op)
        where = path + (op,)
        if op not in OPERATORS:
            ctx.error(path, f"unknown operator '{op}' (expected one of {', '.join(OPERATORS)}){_hint(op, OPERATORS)}")
            ok = False
        elif op == "eq" or op == "contains":
            if not _is_scalar(operand):
                ctx.error(where, f"must be a string, number or boolean, got {_type_name(operand)}")
                ok = False
            else:
                out.append(Condition(feature, op, operand))
        elif op == "in":
            if not isinstance(operand, list) or not operand or not all(_is_scalar(x) for x in operand):
                ctx.error(where, "must be a non-empty list of strings, numbers or booleans")
                ok = False
            else:
                vals: frozenset[Scalar] = frozenset(operand)
                out.append(Condition(feature, "in", tuple(operand), vals))
        elif op in ("exists", "nonempty"):
            if not isinstance(operand, bool):
                ctx.error(where, f"must be true or false, got {_type_name(operand)}")
                ok = False
            else:
                out.append(Condition(feature, op, operand))
        elif op == "prefix":
            if not isinstance(operand, str) or not operand:
                ctx.error(where, f"must be a non-empty string, got {_type_name(operand)}")
                ok = False
            else:
                out.append(Condition(feature, "prefix", operand))
        else:  # gt gte lt lte
            if not _is_number(operand):
                ctx.error(where, f"must be a number, got {_type_name(operand)}")
                ok = False
            else:
                out.append(Condition(feature, op, operand))
    return out if ok else None


def _parse_action(ctx: _RuleContext, raw: Any, path: Path_) -> Action | None:
    if not isinstance(raw, dict):
        ctx.error(path, f"must be a mapping with one of {', '.join(ACTION_KEYS)}, got {_type_name(raw)}")
        return None
    kinds = [k for k in raw if k in ACTION_KEYS]
    ok = True
    for key in raw:
        if key not in ACTION_KEYS and key not in ACTION_OPTIONS and key != "pin_session":
            allowed = ACTION_KEYS + tuple(ACTION_OPTIONS) + ("pin_session",)
            ctx.error(path + (str(key),), f"unknown action (expected one of {', '.join(ACTION_KEYS)}){_hint(str(key), allowed)}")
            ok = False
    if not kinds:
        if ok:
            ctx.error(path, f"needs one of {', '.join(ACTION_KEYS)}")
        return None
    if len(kinds) > 1:
        ctx.error(path, f"has several actions ({', '.join(kinds)}); a rule takes exactly one (use continue: true to apply more)")
        return None
    kind = kinds[0]
    for opt, owner in ACTION_OPTIONS.items():
        if opt in raw and kind != owner:
            ctx.error(path + (opt,), f"only applies to {owner}, not {kind}")
            ok = False
    pin = raw.get("pin_session", False)
    if not isinstance(pin, bool):
        ctx.error(path + ("pin_session",), f"must be true or false, got {_type_name(pin)}")
        ok = False
    value = raw[kind]
    where = path + (kind,)

    def name_or_error(val: Any, at: Path_, what: str) -> str | None:
        if isinstance(val, str) and val.strip():
            return val
        ctx.error(at, f"must be {what}, got " + ("an empty string" if isinstance(val, str) else _type_name(val)))
        return None

    if kind == "route_to":
        agent = name_or_error(value, where, "an agent or group name")
        return RouteTo(agent, pin) if agent and ok else None
    if kind == "broadcast_to":
        group = name_or_error(value, where, "a group name")
        return BroadcastTo(group, pin) if group and ok else None
    if kind == "load_balance":
        pool = name_or_error(value, where, "a pool (group) name")
        strategy = raw.get("strategy", "round_robin")
        if strategy not in STRATEGIES:
            ctx.error(
                path + ("strategy",),
                f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})"
                + (_hint(strategy, STRATEGIES) if isinstance(strategy, str) else ""),
            )
            return None
        return LoadBalance(pool, str(strategy), pin) if pool and ok else None
    if kind == "drop":
        reason = name_or_error(value, where, "a reason (a non-empty string)")
        return Drop(reason, pin) if reason and ok else None
    if kind == "clone_and_route_to":
        if not isinstance(value, list) or not value or not all(isinstance(x, str) and x.strip() for x in value):
            ctx.error(where, "must be a non-empty list of agent names")
            return None
        if len(set(value)) != len(value):
            ctx.error(where, "lists the same agent twice")
            return None
        return CloneAndRouteTo(tuple(value), pin) if ok else None
    if kind == "learn":
        return _parse_learn(ctx, value, where, pin) if ok else None
    if kind == "capability":
        group = name_or_error(value, where, "'any', 'skills', 'learned' or a group name")
        if group is None or not ok:
            return None
        if group == "learned":
            for opt in ("min", "score"):
                if opt in raw:
                    ctx.error(path + (opt,), "only applies to capability: skills")
                    return None
            return Learn(None, pin_session=pin)
        for opt in ("min", "score"):
            if opt in raw and group != "skills":
                ctx.error(path + (opt,), "only applies to capability: skills")
                return None
        if group == "skills":
            threshold = raw.get("min")  # absent: the sentence model's own (docs/features.md)
            if threshold is not None and (not _is_number(threshold) or not -1 <= threshold <= 1):
                ctx.error(path + ("min",), f"must be a number from -1 to 1 (a cosine), got {threshold!r}")
                return None
            score = raw.get("score")  # absent: the sentence model's own
            if score is not None and score not in SKILL_SCORES:
                ctx.error(path + ("score",), f"must be one of {', '.join(SKILL_SCORES)} (how an agent's skill texts' "
                                             f"cosines make its score), got {score!r}")
                return None
            return Capability(None, pin, skills=True, min_score=None if threshold is None else float(threshold), score=score)
        return Capability(None if group == "any" else group, pin)
    # transform
    if not isinstance(value, str):
        ctx.error(where, f"must be a media type such as text/plain, got {_type_name(value)}")
        return None
    try:
        to = parse_modality(value, field="transform")
    except InvalidModality as exc:
        ctx.error(where, exc.message.removeprefix("transform: "))
        return None
    then: Action = Capability()
    if "then" in raw:
        nested = _parse_action(ctx, raw["then"], path + ("then",))
        if nested is None:
            return None
        if isinstance(nested, Drop):
            ctx.error(path + ("then",), "cannot drop after a transform; drop the part instead")
            return None
        then = nested
    return Transform(to, then, pin) if ok else None


def _parse_learn(ctx: _RuleContext, value: Any, where: Path_, pin: bool) -> Learn | None:
    """`learn: {among: GROUP or [agents], explore: 0.05, feedback: own|shared}` (every key optional)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        ctx.error(where, f"must be a mapping with among, explore, feedback (each optional), got {_type_name(value)}")
        return None
    for key in value:
        if key not in LEARN_KEYS:
            ctx.error(where + (str(key),), f"unknown option (expected one of {', '.join(LEARN_KEYS)})"
                                           f"{_hint(str(key), LEARN_KEYS)}")
            return None
    among_raw = value.get("among")
    among: str | tuple[str, ...] | None = None
    if isinstance(among_raw, str) and among_raw.strip():
        among = among_raw
    elif isinstance(among_raw, list) and among_raw and all(isinstance(x, str) and x.strip() for x in among_raw):
        if len(set(among_raw)) != len(among_raw):
            ctx.error(where + ("among",), "lists the same agent twice")
            return None
        among = tuple(among_raw)
    elif among_raw is not None:
        ctx.error(where + ("among",), f"must be a group name or a non-empty list of agent names, got {_type_name(among_raw)}")
        return None
    explore = value.get("explore", EXPLORE_DEFAULT)
    if not _is_number(explore) or not 0 <= explore <= EXPLORE_MAX:
        ctx.error(where + ("explore",), f"must be a number from 0 to {EXPLORE_MAX} (the share of exploring choices), "
                                        f"got {explore!r}")
        return None
    feedback = value.get("feedback", "own")
    if feedback not in FEEDBACK_SCOPES:
        ctx.error(where + ("feedback",), f"must be one of {', '.join(FEEDBACK_SCOPES)} (whose ratings count), "
                                         f"got {feedback!r}")
        return None
    return Learn(among, float(explore), str(feedback), pin)


# The pure-Python composer on purpose: libyaml's is ~10x faster but holds the GIL for the whole document (7,000
# rules: seconds in which the event loop of a gateway applying them in a thread could not run).
MAX_RULE_NODES = 200_000  # values of a rule document once YAML aliases are expanded (a rule costs ~10-30)
MAX_RULE_DEPTH = 64  # levels of nested mappings and lists; a rule needs about 8


def _parse_text(text: str, name: str) -> RuleSet:
    lines = _LineMap()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # aliases stay references here: linear in the text
        if node is not None:
            _check_size(node, name)
        data = yaml.SafeLoader(text).construct_document(node) if node is not None else None
    except RecursionError:
        raise RuleError(f"{name}: nests deeper than {MAX_RULE_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        try:
            data = json.loads(text)
        except RecursionError:
            raise RuleError(f"{name}: nests deeper than {MAX_RULE_DEPTH} levels") from None
        except ValueError:
            mark = getattr(exc, "problem_mark", None)
            where = f"{name}:{mark.line + 1}" if mark is not None else name
            problem = getattr(exc, "problem", None) or str(exc)
            raise RuleError(f"{where}: not valid YAML or JSON: {problem}") from None
        if _depth(data) > MAX_RULE_DEPTH:
            raise RuleError(f"{name}: nests deeper than {MAX_RULE_DEPTH} levels")
        return _validate(data, name, None)
    if node is not None:
        lines.walk(node)
    return _validate(data, name, lines)


def _check_size(root: yaml.Node, name: str) -> None:
    """Refuse a composed document deeper than `MAX_RULE_DEPTH` or with more than `MAX_RULE_NODES` values once its
    aliases are expanded (the "billion laughs": nine anchors of nine aliases each expand to 9**9 values), before
    anything builds or walks the expanded document. Each distinct node is sized once, without recursion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_RULE_DEPTH:
            line = node.start_mark.line + 1
            raise RuleError(f"{name}:{line}: nests deeper than {MAX_RULE_DEPTH} levels")
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            sizes[id(node)] = 1
            continue
        if not done:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        if total > MAX_RULE_NODES:
            line = node.start_mark.line + 1
            raise RuleError(f"{name}:{line}: more than {MAX_RULE_NODES} values once YAML aliases are expanded; "
                            "a rule file needs far fewer")
        sizes[id(node)] = total


def _depth(value: Any) -> int:
    """Levels of nested mappings and lists of a parsed document (iterative: a deep one must not overflow)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
    return deepest


def rules_to_json(rules: RuleSet) -> Mapping[str, Any]:
    """The rule document a `RuleSet` was built from (for admin APIs that show the rules back)."""
    return dict(rules.data)
