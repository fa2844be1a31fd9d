"""Perception on media nobody tuned for (tests/features/unseen.py): every item through the feature pipeline
(as `mma2a features FILE --json` runs it), the vision inspector, the captioner and the speech agent, checked
against what is known to be in it. Prints one line per item that is wrong, then counts per split.

    PYTHONPATH=src:. python bench/perception_probe.py [--split dev|held-out] [--only PREFIX] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from typing import Any


def words_of(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def judge(item: Any, row: dict[str, Any], findings: dict[str, Any] | None, heard: tuple[str, str | None] | None) -> list[str]:
    """What is wrong with the answers for `item`, as short notes (empty: right)."""
    t, f = item.truth, row.get("features") or {}
    bad: list[str] = []
    if row.get("error"):
        bad.append(f"error: {row['error']}")
    for note in row.get("errors") or []:
        bad.append(f"extractor error: {note}")
    if row.get("timedOut"):
        bad.append(f"timed out: {row['timedOut']}")
    if item.filename.rsplit(".", 1)[1] in ("png", "jpg"):
        text = f.get("text", "")
        if t.no_text and text:
            bad.append(f"false text {text!r} {[ln['confidence'] for ln in f.get('textLines', [])]}")
        if t.text and not set(t.text) <= words_of(text):
            bad.append(f"missed text {t.text} read {text!r}")
        codes = {(c["format"], c["text"]) for c in f.get("codes", [])}
        if t.no_codes and codes:
            bad.append(f"false codes {codes}")
        for c in t.codes:
            if c not in codes:
                bad.append(f"missed code {c} read {codes}")
        if findings is not None:
            if t.no_defects and findings.get("defects"):
                bad.append(f"false defects {[d['contrast'] for d in findings['defects']]}")
            if t.no_text and findings.get("text"):
                bad.append("vision: false text")
            if findings.get("lights") and t.no_defects:
                bad.append(f"false lights {len(findings['lights'])}")
    else:
        said = f.get("transcript", "")
        if t.no_speech and said:
            bad.append(f"false transcript {said!r}")
        if t.words and not said and f.get("unclear"):
            bad.append("abstained: heard, not understood (unclear)")
        elif t.words:
            got = words_of(said)
            miss = [w for w in t.words if w not in got]
            if len(miss) > len(t.words) // 3:
                bad.append(f"misheard {said!r} ({len(miss)}/{len(t.words)} words missed)")
        if heard is not None and t.no_speech and heard[0]:
            bad.append(f"speech agent heard {heard[0]!r}")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split")
    ap.add_argument("--only", default="")
    ap.add_argument("--json")
    ap.add_argument("--no-agents", action="store_true")
    args = ap.parse_args()

    from mma2a.agents.captioner import caption
    from mma2a.agents.speech import hear
    from mma2a.agents.vision import inspect_image
    from mma2a.cli.features import _describe
    from mma2a.features import FeaturePipeline, default_extractors
    from tests.features.unseen import every_item

    items = [i for i in every_item() if i.name.startswith(args.only) and (not args.split or i.split == args.split)]
    tally: Counter[tuple[str, str]] = Counter()
    rows = []
    with FeaturePipeline(default_extractors()) as pipeline:
        import pathlib
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for item in items:
                path = pathlib.Path(tmp) / item.filename
                path.write_bytes(item.make())
                t0 = time.perf_counter()
                row = _describe(path, None, 30.0, pipeline)
                findings = heard = None
                cap = ""
                if not args.no_agents and row.get("modality", "").startswith("image/"):
                    findings = inspect_image(path.read_bytes())
                    cap = caption(findings)
                if not args.no_agents and row.get("modality", "").startswith("audio/"):
                    heard = hear(path.read_bytes(), row["modality"])
                bad = judge(item, row, findings, heard)
                took = time.perf_counter() - t0
                tally[(item.split, "abstained" if bad and bad[0].startswith("abstained") else "wrong" if bad else "right")] += 1
                rows.append({"name": item.name, "split": item.split, "modality": row.get("modality"), "bad": bad,
                             "seconds": round(took, 2), "features": row.get("features"), "caption": cap,
                             "heard": heard})
                if bad:
                    print(f"{item.split:8} {item.name}: {'; '.join(bad)}", flush=True)
    for split in ("dev", "held-out"):
        print(f"{split}: {tally[(split, 'right')]} right, {tally[(split, 'wrong')]} wrong, "
              f"{tally[(split, 'abstained')]} abstained")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, default=str, indent=1)
    sys.exit(0)


if __name__ == "__main__":
    main()
