"""Session 19, S19-3, as the attack: an HTML part's words are its visible text (session 18), read by the standard
library's `HTMLParser`, whose time is quadratic in a malformed document's length: 200,000 characters of `<a` took 21 s of
CPU, 1,000,000 ~500 s, in a features thread that no budget stops (the part goes on "not done within the budget", the
thread keeps reading), so a few such parts held every thread of the gateway's features pool and every client's text
features were skipped (docs/security.md S19-3). Now one forward pass."""

from __future__ import annotations

import time

import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from mma2a.ext import EXTENSION_URI
from mma2a.features.text import count_words, html_text
from tests.gateway.conftest import agent, agents, gateway

ATTACKS = ["<a", "<!--", "</", "<", '<a "x>', "<a b='", "<!", "<?", "<script>", "&#"]


def ordinary(length: int) -> str:
    """An ordinary page of about `length` characters: paragraphs, links, a comment, a script."""
    block = ('<div class="post"><h2>News</h2><p>The <b>quick</b> brown fox &amp; the <a href="/dog?x=1&amp;y=2">lazy '
             'dog</a> met at noon.</p><!-- teaser --><script>var n = 1 < 2;</script></div>\n')
    return block * (length // len(block) + 1)


def cpu(markup: str) -> float:
    """This thread's CPU time to read `markup` (not the clock's: the host's load does not enter it)."""
    start = time.thread_time()
    html_text(markup)
    return time.thread_time() - start


@pytest.mark.parametrize("unit", ATTACKS)
def test_malformed_markup_is_read_in_time_linear_in_its_length(unit: str) -> None:
    """Each malformed document of 100,000 characters takes no more CPU than an ordinary page of that length, within a
    wide margin (20x and 50 ms); before, `<a` and `<!--` took ~5 s against ~0.03 s."""
    n = 100_000
    page = ordinary(n)[:n]
    attack = unit * (n // len(unit))
    base = min(cpu(page) for _ in range(3))
    assert cpu(attack) <= 20 * base + 0.05


def test_the_visible_text_is_what_a_browser_shows() -> None:
    page = ('<!DOCTYPE html><html><head><title>Bon</title><style>p{color:red}</style></head><body>'
            '<h1>Title</h1><p>Some <b>bold</b> text &amp; a <a href="x>y">link</a>.<br/>5 < 6 &lt;tag&gt;</p>'
            '<!-- not shown --><SCRIPT>document.write("</p>")</SCRIPT><template><p>hidden</p></template>'
            '<noscript>enable js</noscript><ul><li>One</li><li>Two</li></ul></body></html>')
    assert html_text(page).split() == ["Title", "Some", "bold", "text", "&", "a", "link", ".", "5", "<", "6", "<tag>",
                                       "One", "Two"]
    assert html_text("<p>shown</p><!-- open to the end <p>gone").split() == ["shown"]
    assert html_text("<p>shown</p><script>var gone = 1;").split() == ["shown"]
    one = count_words(html_text(ordinary(1)))
    assert one >= 10 and count_words(html_text(ordinary(1) * 50)) == 50 * one


async def test_a_part_of_a_million_characters_of_malformed_markup_is_read_within_the_features_budget() -> None:
    rules = {"version": 1, "rules": [{"name": "english", "match": {"modality": "text/*", "features": {
        "language": {"eq": "en"}}}, "action": {"route_to": "reader"}}]}
    specs = {"reader": agent("reader", ["text/*"])}
    words = "<p>The quick brown fox jumps over the lazy dog near the river bank today.</p>"
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": "reader", "url": urls["reader"]}],
                            "features": {"budget_s": 30}}) as (_, url), httpx.AsyncClient(timeout=120) as c:
            r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "html-1", "role": "ROLE_USER",
                "parts": [{"text": words + "<a" * 500_000, "mediaType": "text/html"}]}}}, headers={"A2A-Version": "1.0"})
    assert "result" in r.json(), r.text[:300]
    (sent,) = specs["reader"][1].received[0].message.parts
    features = MessageToDict(sent.metadata)[EXTENSION_URI]["features"]
    assert features["language"] == "en" and "incomplete" not in features, features
