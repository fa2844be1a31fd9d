"""The console in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium.

The test signs in with the admin token, reads the charts, filters the history, opens an
agent's card, edits a rule, validates it, dry-runs it on recent history, applies it, and
saves a screenshot of each step (to MMA2A_SCREENSHOTS if set, else a temporary directory).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from mma2a.ext import EXTENSION_URI
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc
from tests.gateway.test_history import RULES
from tests.media import png_bytes

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no browser: install Debian's chromium and chromium-driver (scripts/test does when it runs as root)")

CANDIDATE = RULES.replace("route_to: vision", "route_to: archive")
HOSTILE = '<img src=x onerror="document.title=1">'


def image(objects: list[str]) -> dict[str, Any]:
    return {"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png",
            "metadata": {EXTENSION_URI: {"features": {"objects": objects}}}}


def browser(profile: str) -> Any:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    except WebDriverException as exc:
        pytest.skip(f"no browser: chromium did not start ({exc.msg})")


def walk_through_the_console(url: str, shots: Path) -> dict[str, Any]:
    """Everything a user does, in the browser; returns what the page showed."""
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mma2a-chromium-") as profile:
        drv = browser(profile)
        wait = WebDriverWait(drv, 20)
        try:
            drv.get(url + "/console")
            wait.until(lambda d: "Sign in" in d.find_element(By.ID, "banner").text)
            seen["before_sign_in"] = drv.find_element(By.ID, "banner").text
            drv.find_element(By.ID, "token").send_keys("not-the-token")
            drv.find_element(By.ID, "sign-in").click()
            wait.until(lambda d: "token" in d.find_element(By.ID, "banner").text and "Sign in" not in
                       d.find_element(By.ID, "banner").text)
            seen["wrong_token"] = drv.find_element(By.ID, "banner").text
            seen["form_after_wrong_token"] = drv.find_element(By.ID, "token").is_displayed()
            drv.find_element(By.ID, "token").send_keys(ADMIN)
            drv.find_element(By.ID, "sign-in").click()
            wait.until(lambda d: d.find_element(By.ID, "signed-in").is_displayed())
            seen["signed_in"] = (drv.find_element(By.ID, "token").is_displayed(),
                                 drv.find_element(By.ID, "sign-out").is_displayed())
            # the route map: modalities on the left, agents on the right, a band per flow
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#route-map svg path.flow"))
            seen["flows"] = sorted(p.get_attribute("data-flow") for p in
                                   drv.find_elements(By.CSS_SELECTOR, "#route-map svg path.flow"))
            seen["map_status"] = drv.find_element(By.CSS_SELECTOR, "#route-map p.status").text
            # overview: the charts draw what history counted
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-traffic-modality svg polyline, "
                                                                  "#chart-traffic-modality svg circle"))
            seen["legend_modality"] = drv.find_element(By.CSS_SELECTOR, "#chart-traffic-modality .legend").text
            seen["legend_agent"] = drv.find_element(By.CSS_SELECTOR, "#chart-latency-agent .legend").text
            seen["latency_peak"] = drv.find_element(By.CSS_SELECTOR, "#chart-latency-agent svg text.peak").text
            drv.save_screenshot(str(shots / "console-overview.png"))
            # history: everything, then a filter, then a bad filter
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=history]").click()
            rows = "#history tr"
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == 4)
            seen["all"] = [r.get_attribute("data-message-id") for r in drv.find_elements(By.CSS_SELECTOR, rows)]
            seen["hostile_text"] = drv.find_element(By.CSS_SELECTOR, "#history tr:first-child td:nth-child(2)").text
            seen["hostile_imgs"] = len(drv.find_elements(By.CSS_SELECTOR, "#history img"))
            form = drv.find_element(By.ID, "history-filters")
            form.find_element(By.NAME, "modality").send_keys("image/*")
            Select(form.find_element(By.NAME, "outcome")).select_by_value("completed")
            drv.find_element(By.ID, "history-search").click()
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == 2)
            seen["images"] = [r.get_attribute("data-message-id") for r in drv.find_elements(By.CSS_SELECTOR, rows)]
            seen["first_route"] = drv.find_element(By.CSS_SELECTOR, "#history tr:last-child td:nth-child(4)").text
            drv.save_screenshot(str(shots / "console-history.png"))
            form.find_element(By.NAME, "modality").clear()
            form.find_element(By.NAME, "modality").send_keys("image")
            drv.find_element(By.ID, "history-search").click()
            wait.until(lambda d: d.find_element(By.ID, "history-error").is_displayed())
            seen["bad_filter"] = drv.find_element(By.ID, "history-error").text
            # agents: health and the card
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=agents]").click()
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#agents tr[data-agent]")) == 3)
            seen["agents"] = {r.get_attribute("data-agent"): r.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text
                              for r in drv.find_elements(By.CSS_SELECTOR, "#agents tr[data-agent]")}
            vision = drv.find_element(By.CSS_SELECTOR, "#agents tr[data-agent=vision]")
            vision.find_element(By.TAG_NAME, "summary").click()
            wait.until(lambda d: '"name": "vision"' in vision.find_element(By.TAG_NAME, "pre").text)
            seen["card"] = vision.find_element(By.TAG_NAME, "pre").text
            drv.save_screenshot(str(shots / "console-agents.png"))
            # rules: a broken edit is refused with its errors; then validate, dry-run, apply
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=rules]").click()
            editor = drv.find_element(By.ID, "rules-editor")
            wait.until(lambda d: '"route_to": "vision"' in editor.get_attribute("value"))
            drv.execute_script("arguments[0].value = arguments[1]", editor, RULES.replace("vision", "nobody"))
            drv.find_element(By.ID, "rules-validate").click()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#rules-result ul.errors li"))
            seen["invalid"] = drv.find_element(By.ID, "rules-result").text
            drv.execute_script("arguments[0].value = arguments[1]", editor, CANDIDATE)
            drv.find_element(By.ID, "rules-validate").click()
            wait.until(lambda d: d.find_elements(By.ID, "rules-valid"))
            seen["valid"] = drv.find_element(By.ID, "rules-valid").text
            drv.find_element(By.ID, "rules-dryrun").click()
            wait.until(lambda d: d.find_elements(By.ID, "dryrun-summary"))
            seen["dryrun"] = drv.find_element(By.ID, "dryrun-summary").text
            seen["dryrun_rows"] = [r.text for r in drv.find_elements(By.CSS_SELECTOR, "#dryrun-rows tr")]
            drv.save_screenshot(str(shots / "console-rules.png"))
            # explain one message: the decision view's table of every agent considered (before the edit applies)
            sample = drv.find_element(By.ID, "sample")
            drv.execute_script("arguments[0].value = arguments[1]", sample, json.dumps({
                "messageId": "x-1", "role": "ROLE_USER", "parts": [{"url": "https://example.org/a.png", "mediaType": "image/png"}]}))
            drv.find_element(By.ID, "explain").click()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#decision-view table.decision-table tbody tr"))
            table = drv.find_element(By.CSS_SELECTOR, "#decision-view table.decision-table")
            seen["decision_caption"] = table.find_element(By.TAG_NAME, "caption").text
            seen["decision_rows"] = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                                     for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
            drv.find_element(By.ID, "rules-apply").click()
            wait.until(lambda d: d.find_elements(By.ID, "rules-applied"))
            seen["applied"] = drv.find_element(By.ID, "rules-applied").text
            seen["title"] = drv.title
            # a tab has an address: opened by link, and the back button returns to the one before
            drv.get("about:blank")  # a fresh page (same tab, so the sign-in holds), opened at the tab's address
            drv.get(url + "/console#history")
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#history tr")) == 4)
            seen["linked_tab"] = [s.get_attribute("id") for s in drv.find_elements(By.CSS_SELECTOR, "section.tab")
                                  if s.is_displayed()]
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=agents]").click()
            wait.until(lambda d: d.find_element(By.ID, "tab-agents").is_displayed())
            drv.back()
            wait.until(lambda d: d.find_element(By.ID, "tab-history").is_displayed())
            seen["after_back"] = drv.execute_script("return location.hash")
            seen["csp_reports"] = [e["message"] for e in drv.get_log("browser")
                                   if "Content Security Policy" in e["message"] or "Refused to" in e["message"]]
        finally:
            drv.quit()
    return seen


async def test_console_in_a_browser_sign_in_filter_history_edit_dry_run_apply(tmp_path):
    shots = Path(os.environ.get("MMA2A_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    specs = {"vision": agent("vision", ["image/*"]), "writer": agent("writer", ["text/plain"]),
             "archive": agent("archive", ["image/*", "text/plain"])}
    async with agents(specs) as urls:
        cfg = {"data_dir": str(tmp_path / "data"), "rules": RULES,
               "agents": [{"name": n, "url": u} for n, u in urls.items()]}
        async with gateway(cfg) as (gw, url):
            await rpc(url, "SendMessage", {"message": {"messageId": "cat-1", "role": "ROLE_USER", "parts": [image(["cat"])]}})
            await rpc(url, "SendMessage", {"message": {"messageId": "dog-1", "role": "ROLE_USER", "parts": [image(["dog"])]}})
            await rpc(url, "SendMessage", {"message": {"messageId": "text-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
            await rpc(url, "SendMessage", {"message": {"messageId": HOSTILE, "role": "ROLE_USER", "parts": [{"text": "x"}]}})
            seen = await asyncio.to_thread(walk_through_the_console, url, shots)
            applied = gw.state.rules.data
    assert seen["before_sign_in"] == "Sign in with the admin token to see history, agents and rules."
    assert "invalid token" in seen["wrong_token"]  # the gateway's own words, once
    assert seen["form_after_wrong_token"] is True  # not signed in: the field stays
    assert seen["signed_in"] == (False, True)  # signed in: the field gives way to "signed in" and Sign out
    assert {f.split(">")[0] for f in seen["flows"]} == {"image/png", "text/plain"}
    assert {f.split(">")[1] for f in seen["flows"]} <= {"vision", "writer", "archive"} and "image/png>vision" in seen["flows"]
    assert seen["map_status"] == "4 parts in 4 decisions"
    import re

    assert re.fullmatch(r"\d+(\.\d)? (ms|s)", seen["latency_peak"]), seen["latency_peak"]  # a unit that reads
    assert seen["linked_tab"] == ["tab-history"] and seen["after_back"] == "#history"
    assert "image/png (2)" in seen["legend_modality"] and "text/plain (2)" in seen["legend_modality"]
    legend = dict(item.rsplit(" (", 1) for item in seen["legend_agent"].split("\n"))  # agent -> "count)"
    assert "vision" in legend and sum(int(n.rstrip(")")) for n in legend.values()) == 4  # one target per message
    assert seen["all"] == [HOSTILE, "text-1", "dog-1", "cat-1"]
    assert seen["hostile_text"] == HOSTILE and seen["hostile_imgs"] == 0 and seen["title"] == "mma2a console"
    assert seen["images"] == ["dog-1", "cat-1"]
    assert seen["first_route"] == "0: image/png → vision cats"
    assert seen["bad_filter"] == "modality: must be a media type such as image/png or a family such as image/*, got 'image'"
    assert seen["agents"] == {"vision": "healthy", "writer": "healthy", "archive": "healthy"}
    assert '"defaultInputModes": [\n    "image/*"\n  ]' in seen["card"]
    assert "rules rejected:" in seen["invalid"] and "nobody" in seen["invalid"]
    assert seen["valid"] == "valid: 1 rules"
    assert seen["dryrun"] == "dry-run: 4 recent decisions re-decided, 1 would change"
    assert seen["dryrun_rows"] == ["cat-1 0: image/png vision [cats] archive [cats]"]
    assert seen["decision_caption"] == "capability for image/png: vision"
    assert seen["decision_rows"] == [
        ["vision", "yes", "1.00", "0.50", "", "", "1.10", ""],
        ["archive", "yes", "0.50", "0.50", "", "", "0.60", ""],
        ["writer", "no", "", "", "", "", "", "mode: its card accepts text/plain"]]
    assert seen["applied"].startswith("applied: version ") and seen["applied"].endswith(", 1 rules")
    assert applied["rules"][0]["action"] == {"route_to": "archive"}
    assert seen["csp_reports"] == []
    assert sorted(p.name for p in shots.iterdir()) == [
        "console-agents.png", "console-history.png", "console-overview.png", "console-rules.png"]
