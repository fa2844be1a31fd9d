"""Perception on media nobody tuned for (tests/features/unseen.py): every item through the feature pipeline
(as `mma2a features FILE --json` runs it), the vision inspector, the captioner and the speech agent, checked
against what is known to be in it. Prints one line per item that is wrong, then counts per split.

    PYTHONPATH=src:. python bench/perception_probe.py [--split dev|held-out] [--only PREFIX] [--json OUT]
    PYTHONPATH=src:. python bench/perception_probe.py --rejudge OUT   # a stored run against today's truth, no models
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
        if "faces" in f:
            if t.no_faces and f["faces"]:
                bad.append(f"false faces {f['faces']}")
            if f["faces"] < t.faces:
                bad.append(f"missed faces: {f['faces']} of {t.faces}")
        found = {d["label"]: d["score"] for d in reversed(f.get("detections") or [])}
        if "detections" in f:
            if t.scene is not None:
                wrong = {k: v for k, v in found.items() if k not in t.scene}
                if wrong:
                    bad.append(f"false objects {wrong}")
            missed = [o for o in t.objects if o not in found]
            if missed:
                bad.append(f"missed objects {missed} found {found}")
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


def kind(note: str) -> str:
    """A note's kind, for the counts: its words before the first figure or quote ("false faces", "missed code")."""
    return re.split(r"[\s:]*[0-9'({\[]", note, maxsplit=1)[0]


def summarise(rows: list[dict[str, Any]]) -> None:
    for split in ("dev", "held-out"):
        mine = [r for r in rows if r["split"] == split]
        abstained = sum(1 for r in mine if r["bad"] and r["bad"][0].startswith("abstained"))
        wrong = sum(1 for r in mine if r["bad"]) - abstained
        kinds = Counter(kind(b) for r in mine for b in r["bad"])
        print(f"{split}: {len(mine) - wrong - abstained} right, {wrong} wrong, {abstained} abstained; "
              + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))


def rejudge(path: str, split: str | None, only: str) -> None:
    """A stored run judged against the truth as it is now written (items added since are left out)."""
    from tests.features.unseen import every_item

    items = {i.name: i for i in every_item()}
    rows = [r for r in json.load(open(path)) if r["name"] in items and r["name"].startswith(only)
            and (not split or r["split"] == split)]
    for r in rows:
        heard = tuple(r["heard"]) if r.get("heard") else None
        old = [b for b in r["bad"] if b.startswith(("false defects", "false lights", "vision:", "error", "extractor", "timed"))]
        r["bad"] = judge(items[r["name"]], r, r.get("findings"), heard)  # type: ignore[arg-type]
        if "findings" not in r:  # a run stored before the agents' findings were: their notes as they were judged
            r["bad"] += [b for b in old if b not in r["bad"]]
        if r["bad"]:
            print(f"{r['split']:8} {r['name']}: {'; '.join(r['bad'])}")
    summarise(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split")
    ap.add_argument("--only", default="")
    ap.add_argument("--json")
    ap.add_argument("--no-agents", action="store_true")
    ap.add_argument("--rejudge", help="judge a stored --json run again (the truth may have grown since)")
    args = ap.parse_args()
    if args.rejudge:
        rejudge(args.rejudge, args.split, args.only)
        return

    from mma2a.agents.captioner import caption
    from mma2a.agents.speech import hear
    from mma2a.agents.vision import inspect_image
    from mma2a.cli.features import _describe
    from mma2a.features import FeaturePipeline, default_extractors
    from tests.features.unseen import every_item

    items = [i for i in every_item() if i.name.startswith(args.only) and (not args.split or i.split == args.split)]
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
                rows.append({"name": item.name, "split": item.split, "modality": row.get("modality"), "bad": bad,
                             "seconds": round(took, 2), "features": row.get("features"), "caption": cap,
                             "heard": heard, "errors": row.get("errors"), "timedOut": row.get("timedOut"),
                             "findings": None if findings is None else
                             {k: findings.get(k) for k in ("defects", "lights", "text")}})
                if bad:
                    print(f"{item.split:8} {item.name}: {'; '.join(bad)}", flush=True)
    summarise(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, default=str, indent=1)
    sys.exit(0)


if __name__ == "__main__":
    main()
