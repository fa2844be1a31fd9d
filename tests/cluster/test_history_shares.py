"""Each client's share of the cluster's history stream, as every gateway counts it (cluster/history_shares.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.cluster.history_shares import KEEP, STEP_PARTS, StreamShares, client_of, client_token, stored_bytes


def test_a_subject_names_its_client_by_digest_and_decisions_without_one_are_nobodys() -> None:
    token = client_token("mallory")
    assert token.startswith("c") and len(token) == 21 and token != client_token("alice")
    assert client_of(f"mma2a.history.gw-1.{token}") == token
    assert client_of("mma2a.history.gw-1._") is None and client_of("mma2a.history.gw-1") is None  # auth off; before
    # as nats-server counted a message of 100 bytes with these headers (a real server's stream bytes, 209 a message)
    assert stored_bytes("t.history.g1.ca", 100, {"Mma2a-Rows": "1", "Nats-Expected-Stream": "T_HISTORY",
                                                 "Nats-Msg-Size": "100"}) == 209


def test_a_client_past_its_share_loses_its_oldest_to_90_percent_and_another_client_nothing() -> None:
    shares = StreamShares(share=100_000, max_age_s=3600)
    assert shares.counted("calice", 1, 500, 1, 0.0) is None
    cuts = []
    for seq in range(2, 400):
        cut = shares.counted("cmallory", seq, 1_000, 2, 0.0)
        if cut is not None:
            cuts.append(cut)
        assert shares.held("cmallory") <= 100_000
    assert shares.held("calice") == 500  # never cut: under its share
    assert cuts and all(rows == 2 * (upto - before) for (upto, rows), before in zip(cuts, [1] + [c[0] for c in cuts]))
    assert shares.held("cmallory") >= int(100_000 * KEEP) - shares.step  # her newest 90%, less one run at most
    assert shares.runs("cmallory") <= STEP_PARTS + 2
    assert shares.counted("cmallory", cuts[-1][0], 1_000, 2, 0.0) is None  # a message purged already: not counted


def test_a_message_larger_than_the_share_keeps_the_newest_run() -> None:
    shares = StreamShares(share=10_000, max_age_s=3600)
    assert shares.counted("cm", 1, 50_000, 10, 0.0) is None  # alone: kept
    assert shares.counted("cm", 2, 60_000, 10, 0.0) == (1, 10)
    assert shares.held("cm") == 60_000


def test_clients_that_published_nothing_for_max_age_are_forgotten() -> None:
    shares = StreamShares(share=10_000, max_age_s=60)
    shares.counted("ca", 1, 100, 1, 0.0)
    shares.counted("cb", 2, 100, 1, 61.0)
    assert len(shares) == 1 and shares.held("ca") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ca", "cb", "cc"]), st.integers(1, 30_000)), min_size=1, max_size=300))
def test_a_cut_keeps_what_the_plain_rule_keeps_less_one_run(messages: list[tuple[str, int]]) -> None:
    """Counted in the stream's order: a client is held to its share (or its newest run), and a cut keeps the newest
    messages within 90% of the share (the plain rule), less at most one run (a run is under `step` bytes before its
    last message); the decisions a cut reports are those of the messages it removes; the others' counts stay whole."""
    share = 50_000
    shares = StreamShares(share=share, max_age_s=3600)
    kept: dict[str, list[tuple[int, int]]] = {}
    for seq, (client, size) in enumerate(messages, 1):
        cut = shares.counted(client, seq, size, 1, 0.0)
        mine = kept.setdefault(client, [])
        mine.append((seq, size))
        if cut is not None:
            upto, rows = cut
            plain, newest = 0, 0
            for _, n in reversed(mine):  # the plain rule: the newest within 90% of the share, and the newest one
                if plain + n > int(share * KEEP) and newest:
                    break
                plain += n
                newest += 1
            assert rows == sum(1 for s, _ in mine if s <= upto)
            mine[:] = [m for m in mine if m[0] > upto]
            assert sum(n for _, n in mine) >= plain - (shares.step + 30_000)
        for other, theirs in kept.items():
            assert shares.held(other) == sum(n for _, n in theirs)
        assert shares.held(client) <= share or shares.runs(client) == 1
