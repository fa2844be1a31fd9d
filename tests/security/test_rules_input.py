"""Hostile rule text through the admin API (issue 18, round 3): YAML alias bombs and deep nesting are refused
with a 400 naming the problem, parsed off the event loop, and never disturb other clients."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mma2a.errors import RuleError
from mma2a.routing import parse_rules
from mma2a.routing.loader import MAX_RULE_DEPTH, MAX_RULE_NODES
from tests.gateway.conftest import ADMIN
from tests.security.conftest import secured

# nine anchors, each a list of nine aliases of the previous one: 9**9 (387 million) values once expanded, 700 bytes
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "rules: [*i]\n"
DEEP_FLOW = "rules: " + "[" * 50_000 + "]" * 50_000
DEEP_JSON = '{"rules": [' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "]}"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def test_alias_bombs_and_deep_documents_are_refused_naming_the_problem():
    with pytest.raises(RuleError) as bomb:
        parse_rules(LAUGHS)
    assert bomb.value.message == (f"<rules>:6: more than {MAX_RULE_NODES} values once YAML aliases are expanded; "
                                  "a rule file needs far fewer")
    for text in (DEEP_FLOW, DEEP_JSON, "rules: " + "[" * (MAX_RULE_DEPTH + 1) + "]" * (MAX_RULE_DEPTH + 1)):
        with pytest.raises(RuleError) as deep:
            parse_rules(text)
        assert deep.value.message.endswith(f"nests deeper than {MAX_RULE_DEPTH} levels"), deep.value.message
    # anchors and aliases within the budget still work, and the line numbers still name the rule
    two = ("rules:\n  - name: r\n    match: &m {modality: 'image/*'}\n    action: {route_to: vision}\n"
           "  - name: s\n    match: *m\n    action: {%s: vision}\n")
    assert [r.name for r in parse_rules(two % "route_to").rules] == ["r", "s"]
    with pytest.raises(RuleError) as late:
        parse_rules(two % "route_too")
    assert late.value.message.startswith("<rules>:7: rule 's': action.route_too: unknown action"), late.value.message


async def test_hostile_rule_bodies_get_400_and_other_clients_are_served_meanwhile():
    async with secured() as (gw, url, _), httpx.AsyncClient(timeout=60) as c:
        async def attack(path: str, body: str) -> httpx.Response:
            if path == "/admin/history/replay":
                return await c.post(url + path, json={"rules": body}, headers=ADMIN_HEADERS)
            if path == "/admin/rules":
                return await c.put(url + path, content=body, headers=ADMIN_HEADERS)
            return await c.post(url + path, content=body, headers=ADMIN_HEADERS)

        attacks = [attack(p, b) for p in ("/admin/rules", "/admin/rules/validate", "/admin/history/replay")
                   for b in (LAUGHS, DEEP_FLOW, DEEP_JSON)]
        health = [c.get(url + "/healthz") for _ in range(5)]
        answers = await asyncio.gather(*attacks, *health)
        rules_after = await c.get(url + "/admin/rules", headers=ADMIN_HEADERS)
    for r in answers[:len(attacks)]:
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert "nests deeper than" in message or "values once YAML aliases are expanded" in message, message
    assert all(r.status_code == 200 for r in answers[len(attacks):])
    assert rules_after.json()["version"] == gw.state.snapshot.version  # the rules in force did not change
