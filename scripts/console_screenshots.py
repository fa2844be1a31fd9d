"""Regenerate docs/img/console-*.png: real agents and a real gateway, a few minutes of mixed traffic, the console
in headless Chromium (the same driver setup as tests/gateway/test_console_browser.py).

    PYTHONPATH=src .venv/bin/python scripts/console_screenshots.py [--seconds 180] [--out docs/img]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from mma2a.ext import EXTENSION_URI  # noqa: E402
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc  # noqa: E402
from tests.gateway.test_console_browser import CANDIDATE, RULES, browser  # noqa: E402
from tests.media import png_bytes, wav_bytes  # noqa: E402

RULES_SHOWN = RULES + """  - name: long-text-to-archive
    match: {modality: text/plain, features: {length: {gt: 400}}}
    action: {route_to: archive}
  - name: no-jpeg-here
    match: {modality: image/jpeg}
    action: {drop: jpeg photos go to the other site}
"""


def part(rnd: random.Random) -> dict[str, object]:
    kind = rnd.choice(["cat", "dog", "text", "long", "audio", "jpeg"])
    if kind in ("cat", "dog", "jpeg"):
        p: dict[str, object] = {"raw": base64.b64encode(png_bytes(32, 24)).decode(),
                                "mediaType": "image/jpeg" if kind == "jpeg" else "image/png"}
        p["metadata"] = {EXTENSION_URI: {"features": {"objects": [kind if kind != "jpeg" else "hinge"]}}}
        return p
    if kind == "audio":
        return {"raw": base64.b64encode(wav_bytes(0.1)).decode(), "mediaType": "audio/wav"}
    return {"text": "x" * (600 if kind == "long" else 40)}


async def traffic(url: str, seconds: float) -> None:
    rnd = random.Random(3)
    loop = asyncio.get_running_loop()
    end, i = loop.time() + seconds, 0
    while loop.time() < end:
        parts = [part(rnd) for _ in range(rnd.choice((1, 1, 2)))]
        await rpc(url, "SendMessage", {"message": {"messageId": f"msg-{i:04d}", "role": "ROLE_USER", "parts": parts}})
        i += 1
        await asyncio.sleep(rnd.uniform(0.05, 0.6))


def shoot(url: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mma2a-chromium-") as profile:
        drv = browser(profile)
        wait = WebDriverWait(drv, 20)
        try:
            drv.get(url + "/console#token=" + ADMIN)
            wait.until(lambda d: "over 1 hour" in d.find_element(By.ID, "overview-status").text)
            Select(drv.find_element(By.ID, "span")).select_by_value("900")
            wait.until(lambda d: "over 15 min" in d.find_element(By.ID, "overview-status").text)
            drv.save_screenshot(str(out / "console-overview.png"))
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=history]").click()
            form = drv.find_element(By.ID, "history-filters")
            form.find_element(By.NAME, "modality").send_keys("image/*")
            drv.find_element(By.ID, "history-search").click()
            wait.until(lambda d: "decisions shown" in d.find_element(By.ID, "history-status").text)
            drv.save_screenshot(str(out / "console-history.png"))
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=agents]").click()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#agents tr[data-agent=vision]"))
            vision = drv.find_element(By.CSS_SELECTOR, "#agents tr[data-agent=vision]")
            vision.find_element(By.TAG_NAME, "summary").click()
            wait.until(lambda d: '"name": "vision"' in vision.find_element(By.TAG_NAME, "pre").text)
            drv.save_screenshot(str(out / "console-agents.png"))
            drv.find_element(By.CSS_SELECTOR, "#tabs [data-tab=rules]").click()
            editor = drv.find_element(By.ID, "rules-editor")
            wait.until(lambda d: "route_to" in editor.get_attribute("value"))
            drv.execute_script("arguments[0].value = arguments[1]", editor, CANDIDATE)
            drv.find_element(By.ID, "rules-dryrun").click()
            wait.until(lambda d: d.find_elements(By.ID, "dryrun-summary"))
            drv.save_screenshot(str(out / "console-rules.png"))
        finally:
            drv.quit()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = {"vision": agent("vision", ["image/*"]), "writer": agent("writer", ["text/plain"]),
             "archive": agent("archive", ["image/*", "text/plain"]), "speech": agent("speech", ["audio/*"])}
    with tempfile.TemporaryDirectory(prefix="mma2a-shots-") as data:
        async with agents(specs) as urls:
            cfg = {"data_dir": data, "rules": RULES_SHOWN, "agents": [{"name": n, "url": u} for n, u in urls.items()]}
            async with gateway(cfg) as (gw, url):
                await traffic(url, args.seconds)
                await asyncio.to_thread(shoot, url, out)
    print("wrote", ", ".join(sorted(p.name for p in out.glob("console-*.png"))))


if __name__ == "__main__":
    asyncio.run(main())
