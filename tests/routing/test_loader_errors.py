"""Every mistake a rule author can make, with the exact message they see (file, line, rule, field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mma2a.errors import error_info
from mma2a.errors import INVALID_PARAMS, RuleError
from mma2a.routing import AgentInfo, build_snapshot, load_rules_file, parse_rules

R = "rules:\n  - name: a\n"  # a rule header most cases share (the rule starts on line 2)

CASES = [
    ("rules:\n  - name: a\n    match: {modality: [\n", "<rules>:4: not valid YAML or JSON: expected the node content, but found '<stream end>'"),
    ("", "<rules>: the rule file is empty; expected a mapping with a 'rules' list"),
    ("- a\n- b\n", "<rules>:1: the rule file must be a mapping with a 'rules' list, got a list"),
    ("version: 1\nrule: []\nrules: []\n", "<rules>:2: rule: unknown field (expected one of version, default, groups, rules); did you mean 'rules'?"),
    ("version: 2\nrules: []\n", "<rules>:1: version: unsupported rules version 2 (this build reads version 1)"),
    ("version: 1\n", "<rules>:1: missing field 'rules' (a list of rules, may be empty)"),
    ("rules: {a: 1}\n", "<rules>:1: rules: must be a list of rules, got a mapping"),
    ("rules:\n  - just-a-string\n", "<rules>:2: rules[0]: must be a mapping with name, match and action, got a string"),
    ("rules:\n  - match: {}\n    action: {drop: x}\n", "<rules>:2: rules[0]: name: missing (every rule needs a unique name)"),
    (
        "rules:\n  - name: my rule\n    match: {}\n    action: {drop: x}\n",
        "<rules>:2: rules[0]: name: 'my rule' is not a valid rule name (1 to 128 letters, digits, '.', '_', ':' or '-', "
        "starting with a letter or digit)",
    ),
    (
        R + "    match: {}\n    action: {drop: x}\n  - name: a\n    match: {}\n    action: {drop: x}\n",
        "<rules>:5: rule 'a': name: duplicate rule name (first used by rules[0])",
    ),
    (
        R + "    match: {}\n    action: {drop: x}\n    desc: hi\n",
        "<rules>:5: rule 'a': desc: unknown field (expected one of name, description, priority, match, action, continue, on_incomplete)",
    ),
    (R + "    description: 5\n    match: {}\n    action: {drop: x}\n", "<rules>:3: rule 'a': description: must be a string, got a number"),
    (R + "    priority: high\n    match: {}\n    action: {drop: x}\n", "<rules>:3: rule 'a': priority: must be an integer, got a string"),
    (R + "    continue: maybe\n    match: {}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': continue: must be true or false, got a string"),
    (R + "    action: {route_to: x}\n", "<rules>:2: rule 'a': match: missing (use match: {} to match every part)"),
    (R + "    match: [image/png]\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match: must be a mapping (modality, features, or any), got a list"),
    (
        R + "    match: {modality: image/png, any: [{}]}\n    action: {route_to: x}\n",
        "<rules>:3: rule 'a': match: 'any' cannot be combined with modality; put them inside each 'any' entry",
    ),
    (R + "    match: {any: []}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.any: must be a non-empty list of conditions (an OR of ANDs)"),
    (
        R + "    match:\n      any:\n        - any: [{modality: image/png}]\n    action: {route_to: x}\n",
        "<rules>:5: rule 'a': match.any[0].any: 'any' cannot be nested (a rule is an OR of ANDs, two levels)",
    ),
    (
        R + "    match:\n      any:\n        - 5\n    action: {route_to: x}\n",
        "<rules>:5: rule 'a': match.any[0]: must be a mapping with modality and/or features, got a number",
    ),
    (
        R + "    match: {modality: image/png, feature: {}}\n    action: {route_to: x}\n",
        "<rules>:3: rule 'a': match.feature: unknown field (expected modality, features, semantic, client or any); did you mean 'features'?",
    ),
    (R + "    match: {modality: imagepng}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.modality: 'imagepng' is not a media type (expected type/subtype)"),
    (R + "    match: {modality: 5}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.modality: must be a media type such as image/*, got a number"),
    (
        R + "    match: {features: [a]}\n    action: {route_to: x}\n",
        "<rules>:3: rule 'a': match.features: must be a mapping of feature name to condition, got a list",
    ),
    (
        "rules:\n  - name: drop-blurry\n    match:\n      modality: image/*\n      features: {blur: {less: 50}}\n    action: {drop: too blurry}\n",
        "<rules>:5: rule 'drop-blurry': match.features.blur: unknown operator 'less' "
        "(expected one of eq, in, contains, exists, nonempty, gt, gte, lt, lte, prefix); did you mean 'lt'?",
    ),
    (
        R + "    match: {features: {objects: [cat, dog]}}\n    action: {route_to: x}\n",
        "<rules>:3: rule 'a': match.features.objects: a bare list is ambiguous; write {in: [...]} for one of several values",
    ),
    (R + "    match: {features: {objects: null}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.objects: must be a value or a mapping of operator to operand, got null"),
    (
        R + "    match: {features: {objects: {}}}\n    action: {route_to: x}\n",
        "<rules>:3: rule 'a': match.features.objects: needs at least one operator (eq, in, contains, exists, nonempty, gt, gte, lt, lte, prefix)",
    ),
    (R + "    match: {features: {objects: {eq: {a: 1}}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.objects.eq: must be a string, number or boolean, got a mapping"),
    (R + "    match: {features: {objects: {contains: [a]}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.objects.contains: must be a string, number or boolean, got a list"),
    (R + "    match: {features: {lang: {in: en}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.lang.in: must be a non-empty list of strings, numbers or booleans"),
    (R + "    match: {features: {lang: {exists: 1}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.lang.exists: must be true or false, got a number"),
    (R + "    match: {features: {blur: {gt: '5'}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.blur.gt: must be a number, got a string"),
    (R + "    match: {features: {blur: {lte: true}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.blur.lte: must be a number, got a boolean"),
    (R + "    match: {features: {src: {prefix: 5}}}\n    action: {route_to: x}\n", "<rules>:3: rule 'a': match.features.src.prefix: must be a non-empty string, got a number"),
    (R + "    match: {}\n", "<rules>:2: rule 'a': action: missing"),
    (
        R + "    match: {}\n    action: route_to x\n",
        "<rules>:4: rule 'a': action: must be a mapping with one of route_to, broadcast_to, load_balance, transform, drop, "
        "clone_and_route_to, capability, learn, got a string",
    ),
    (
        R + "    match: {}\n    action: {pin_session: true}\n",
        "<rules>:4: rule 'a': action: needs one of route_to, broadcast_to, load_balance, transform, drop, clone_and_route_to, capability, learn",
    ),
    (
        R + "    match: {}\n    action: {route_to: x, drop: y}\n",
        "<rules>:4: rule 'a': action: has several actions (route_to, drop); a rule takes exactly one (use continue: true to apply more)",
    ),
    (
        R + "    match: {}\n    action: {route_too: x}\n",
        "<rules>:4: rule 'a': action.route_too: unknown action (expected one of route_to, broadcast_to, load_balance, transform, "
        "drop, clone_and_route_to, capability, learn); did you mean 'route_to'?",
    ),
    (R + "    match: {}\n    action: {route_to: x, strategy: weighted}\n", "<rules>:4: rule 'a': action.strategy: only applies to load_balance, not route_to"),
    (
        R + "    match: {}\n    action: {load_balance: p, strategy: random}\n",
        "<rules>:4: rule 'a': action.strategy: unknown strategy 'random' (expected one of round_robin, least_inflight, weighted)",
    ),
    (R + "    match: {}\n    action: {route_to: x, pin_session: 1}\n", "<rules>:4: rule 'a': action.pin_session: must be true or false, got a number"),
    (R + "    match: {}\n    action: {route_to: [x]}\n", "<rules>:4: rule 'a': action.route_to: must be an agent or group name, got a list"),
    (R + "    match: {}\n    action: {broadcast_to: ''}\n", "<rules>:4: rule 'a': action.broadcast_to: must be a group name, got an empty string"),
    (R + "    match: {}\n    action: {load_balance: 3}\n", "<rules>:4: rule 'a': action.load_balance: must be a pool (group) name, got a number"),
    (R + "    match: {}\n    action: {clone_and_route_to: []}\n", "<rules>:4: rule 'a': action.clone_and_route_to: must be a non-empty list of agent names"),
    (R + "    match: {}\n    action: {clone_and_route_to: [x, x]}\n", "<rules>:4: rule 'a': action.clone_and_route_to: lists the same agent twice"),
    (R + "    match: {}\n    action: {transform: text}\n", "<rules>:4: rule 'a': action.transform: 'text' is not a media type (expected type/subtype); did you mean 'text/*'?"),
    (R + "    match: {}\n    action: {transform: 5}\n", "<rules>:4: rule 'a': action.transform: must be a media type such as text/plain, got a number"),
    (R + "    match: {}\n    action: {transform: text/plain, then: {drop: x}}\n", "<rules>:4: rule 'a': action.then: cannot drop after a transform; drop the part instead"),
    (R + "    match: {}\n    action: {transform: text/plain, then: {route_to: 1}}\n", "<rules>:4: rule 'a': action.then.route_to: must be an agent or group name, got a number"),
    (R + "    match: {}\n    action: {route_to: x, then: {route_to: y}}\n", "<rules>:4: rule 'a': action.then: only applies to transform, not route_to"),
    (R + "    match: {}\n    action: {drop: x}\n    continue: true\n", "<rules>:5: rule 'a': continue: a drop action ends evaluation; it cannot continue"),
    (R + "    match: {}\n    action: {drop: ''}\n", "<rules>:4: rule 'a': action.drop: must be a reason (a non-empty string), got an empty string"),
    (R + "    match: {}\n    action: {capability: 5}\n", "<rules>:4: rule 'a': action.capability: must be 'any', 'skills', 'learned' or a group name, got a number"),
    ("default: {capability: 5}\nrules: []\n", "<rules>:1: default: capability: must be 'any', 'skills', 'learned' or a group name, got a number"),
    ("groups: {ops: a}\nrules: []\n", "<rules>:1: groups.ops: must be a list of agent names (may be empty)"),
    ("groups: [ops]\nrules: []\n", "<rules>:1: groups: must be a mapping of group name to a list of agent names, got a list"),
    (R + "    match: {}\n    action: {route_to: x}\n    action: {route_to: y}\n", "<rules>:5: rules[0].action: duplicate key 'action'"),
]


@pytest.mark.parametrize(("text", "message"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_rule_author_error(text: str, message: str) -> None:
    with pytest.raises(RuleError) as info:
        parse_rules(text)
    assert info.value.message == message
    assert info.value.errors[0] == message
    assert info.value.code == INVALID_PARAMS
    assert info.value.to_jsonrpc()["data"] == [error_info(INVALID_PARAMS, {"errors": info.value.errors})]


def test_every_error_is_reported_and_the_message_counts_the_rest() -> None:
    text = R + "    priority: x\n    match: {modality: bad}\n    action: {route_to: x}\n  - name: b\n    match: {}\n    action: {}\n"
    with pytest.raises(RuleError) as info:
        parse_rules(text)
    assert info.value.errors == [
        "<rules>:3: rule 'a': priority: must be an integer, got a string",
        "<rules>:4: rule 'a': match.modality: 'bad' is not a media type (expected type/subtype)",
        "<rules>:8: rule 'b': action: needs one of route_to, broadcast_to, load_balance, transform, drop, clone_and_route_to, capability, learn",
    ]
    assert info.value.message == "<rules>:3: rule 'a': priority: must be an integer, got a string (and 2 more errors)"


def test_errors_from_a_file_carry_its_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("version: 1\nrules:\n  - name: ok\n    match: {}\n    action: {drop: x}\n  - name: bad\n    match: {features: {blur: {lt: soft}}}\n    action: {drop: x}\n")
    with pytest.raises(RuleError) as info:
        load_rules_file(path)
    assert info.value.message == f"{path}:7: rule 'bad': match.features.blur.lt: must be a number, got a string"
    with pytest.raises(RuleError) as info:
        load_rules_file(str(path))
    assert info.value.message.startswith(f"{path}:7: ")


def test_missing_file() -> None:
    with pytest.raises(RuleError) as info:
        load_rules_file("no-such-rules.yaml")
    assert info.value.message == "no-such-rules.yaml: no such rule file"


def test_a_path_is_never_guessed_from_text_nor_text_from_a_path(tmp_path: Path) -> None:
    """`load_rules_file` reads whatever it is given as a path (`C:\\rules.yaml` included); `parse_rules` never reads."""
    with pytest.raises(RuleError) as info:
        load_rules_file("C:\\rules.yaml")
    assert info.value.message == "C:\\rules.yaml: no such rule file"
    path = tmp_path / "rules: yes.yaml"  # a name that looks like YAML is still a file name
    path.write_text("rules:\n  - {name: r, match: {}, action: {drop: why}}\n")
    assert [r.name for r in load_rules_file(path).rules] == ["r"]
    with pytest.raises(RuleError) as info:
        parse_rules("rules.yaml")
    assert info.value.message == "<rules>:1: the rule file must be a mapping with a 'rules' list, got a string"
    with pytest.raises(RuleError) as info:
        parse_rules("rules: [1]\n", source="admin")
    assert info.value.message.startswith("admin:1: rules[0]: ")


def test_json_text_and_json_files_give_lines_too(tmp_path: Path) -> None:
    doc = {"rules": [{"name": "a", "match": {}, "action": {"route_to": 7}}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(RuleError) as info:
        load_rules_file(path)
    assert info.value.message == f"{path}:7: rule 'a': action.route_to: must be an agent or group name, got a number"
    with pytest.raises(RuleError) as info:
        parse_rules(json.dumps(doc))
    assert info.value.message == "<rules>:1: rule 'a': action.route_to: must be an agent or group name, got a number"


def test_parse_rules_on_objects_has_no_lines() -> None:
    with pytest.raises(RuleError) as info:
        parse_rules({"rules": [{"name": "a", "match": {}, "action": {"drop": 1}}]}, source="admin-api")
    assert info.value.message == "admin-api: rule 'a': action.drop: must be a reason (a non-empty string), got a number"


def test_unknown_agent_and_group_names_fail_at_snapshot_time() -> None:
    rules = parse_rules(
        "groups: {operators: []}\n"
        "rules:\n"
        "  - name: a\n    match: {}\n    action: {route_to: nobody}\n"
        "  - name: b\n    match: {}\n    action: {transform: text/plain, then: {load_balance: nopool}}\n"
        "  - name: c\n    match: {}\n    action: {clone_and_route_to: [x, ghost]}\n"
        "  - name: d\n    match: {}\n    action: {broadcast_to: operators}\n"
        "default: {capability: staff}\n"
    )
    with pytest.raises(RuleError) as info:
        build_snapshot(rules, [AgentInfo("x", ("*/*",))])
    assert info.value.errors == [
        "<rules>:5: rule 'a': action.route_to: unknown agent or group 'nobody'",  # the line of route_to, not of the rule
        "<rules>:8: rule 'b': action.then.load_balance: unknown pool (group) or agent 'nopool'",
        "<rules>:11: rule 'c': action.clone_and_route_to[1]: unknown agent or group 'ghost'",
        "<rules>: default.capability: unknown group 'staff'",
    ]
    assert info.value.message == "<rules>:5: rule 'a': action.route_to: unknown agent or group 'nobody' (and 3 more errors)"


def test_an_agent_name_typo_is_reported_at_its_line_with_a_suggestion() -> None:
    rules = parse_rules("rules:\n  - name: a\n    match: {}\n    action:\n      transform: text/plain\n      then:\n"
                       "        route_to: visoin\n")
    with pytest.raises(RuleError) as info:
        build_snapshot(rules, [AgentInfo("x", ("*/*",)), AgentInfo("vision", ("*/*",))])
    assert info.value.errors == ["<rules>:7: rule 'a': action.then.route_to: unknown agent or group 'visoin'; did you mean 'vision'?"]


def test_a_valid_file_loads_in_priority_then_file_order() -> None:
    rules = parse_rules(
        "rules:\n"
        "  - {name: low, match: {}, action: {drop: x}}\n"
        "  - {name: high, priority: 5, match: {}, action: {drop: x}}\n"
        "  - {name: low2, match: {}, action: {drop: x}}\n"
        "  - {name: high2, priority: 5, match: {}, action: {drop: x}}\n"
    )
    assert [r.name for r in rules.rules] == ["high", "high2", "low", "low2"]
    assert [r.line for r in rules.rules] == [3, 5, 2, 4]
