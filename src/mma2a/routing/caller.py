"""`client:` conditions: rules on who is calling (the client id, its claims or attributes).

They are conditions like any other, on derived features the engine adds to each part from the view's caller
(`client.id`, `client.claims.<claim>`), the same for the compiled and the linear evaluator, and explained the
same way. A sender cannot claim them: features of those names in a part are dropped first. Routing stays
pure: the caller enters through the view (`MessageView.caller`), which the gateway fills only when the rules
read it (`caller_claims`), with just the claims they name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..view import Caller, PartView
from .rules import RuleSet

CLIENT_PREFIX = "client."
CLIENT_ID = "client.id"
CLAIMS_PREFIX = "client.claims."


def claim_key(claim: str) -> str:
    """The derived feature a condition on `claim` tests."""
    return CLAIMS_PREFIX + claim


def caller_claims(rules: RuleSet) -> frozenset[str] | None:
    """The claims `client:` conditions name (an empty set: only the client id); None when no rule reads the caller."""
    names = [c.feature for r in rules.rules for cl in r.clauses for c in cl.conditions if c.feature.startswith(CLIENT_PREFIX)]
    if not names:
        return None
    return frozenset(n[len(CLAIMS_PREFIX):] for n in names if n.startswith(CLAIMS_PREFIX))


def with_caller(part: PartView, caller: Caller | None) -> PartView:
    """`part` with the caller's derived features (none for an anonymous caller); a sender's own `client.*`
    features are dropped."""
    feats: dict[str, Any] = {k: v for k, v in part.features.items() if not k.startswith(CLIENT_PREFIX)}
    if caller is not None:
        feats[CLIENT_ID] = caller.id
        for claim, value in caller.claims.items():
            feats[CLAIMS_PREFIX + claim] = value
    return replace(part, features=feats)
