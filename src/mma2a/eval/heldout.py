"""The sealed held-out set: media the agents were never built, tuned or checked against.

Its own photo conditions (other scikit-image photos behind the product: `brick`, `grass`, `coins`, `clock`), its
own defect renderer (`_draw_scuffed`: a crack as a split of two thin lines, a dent as a crescent of shadow with a
highlight), its own eSpeak NG voices (`en-gb-x-gbclan`, `en-gb-x-gbcwmd`, `en`), its own urgent and calm
deliveries, alarm and whine frequencies and rhythms, rough finishes (a brushed streak, a coarse orange peel) and
task seeds (`crossmodal:sealed:…`, task ids `h…`).

Sealed: only `mma2a.eval.runner` imports this module (tests/eval/test_sealed.py checks every module of the
package and of the tests by their imports, and pins this file's SHA-256); what it was and was not used for, and
from which commit, is in docs/evaluation.md ("The sealed held-out set"). A change here unseals it: say so there.
"""

from __future__ import annotations

import math
import random
from typing import Any

from .media import Delivery, Finish, Mark, RGB, Sounds, Variation, VariationSet, Voice


def _draw_scuffed(draw: Any, mark: Mark, rng: random.Random, scale: float, ink: RGB) -> None:
    """A crack as a split: two thin, nearly parallel lines a few pixels apart; a dent as a crescent of shadow with a
    lighter rim on its other side."""
    if mark.kind == "crack":
        length = 64 * scale * mark.size
        angle = rng.uniform(0, math.pi)
        dx, dy = math.cos(angle), math.sin(angle)
        gap = rng.uniform(3, 5) * scale
        for side in (-1, 1):
            pts = []
            for i in range(7):
                t = (i / 6 - 0.5) * length
                wobble = rng.uniform(-3, 3) * scale + side * gap / 2
                pts.append((mark.x + dx * t - dy * wobble, mark.y + dy * t + dx * wobble))
            draw.line(pts, fill=ink, width=max(2, int(3 * scale)))
    else:
        r = rng.uniform(10, 14) * scale * mark.size
        draw.ellipse((mark.x - r, mark.y - r * 0.75, mark.x + r, mark.y + r * 0.75), fill=ink)
        shift = r * 0.45
        rim = tuple(min(255, c + 150) for c in ink)
        draw.ellipse((mark.x - r + shift, mark.y - r * 0.75 + shift * 0.4, mark.x + r * 0.7 + shift,
                      mark.y + r * 0.55 + shift * 0.4), fill=rim)
        draw.ellipse((mark.x - r * 0.6, mark.y - r * 0.45, mark.x + r * 0.2, mark.y + r * 0.35), fill=ink)


HELDOUT = VariationSet(
    "heldout", "crossmodal:sealed", "h",
    photos=(
        Variation("brick-wall", backgrounds=("brick",), rotate_deg=4, perspective=0.03, noise=5.0,
                  draw_mark=_draw_scuffed),
        Variation("grass-dusk", backgrounds=("grass",), gain=(0.6, 0.75), gamma=(1.1, 1.25), noise=6.0,
                  draw_mark=_draw_scuffed),
        Variation("coins-soft", backgrounds=("coins",), blur_sigma=1.2, jpeg_quality=(45, 60), draw_mark=_draw_scuffed),
        Variation("clock-glare", backgrounds=("clock",), gain=(1.05, 1.2), noise=8.0, rotate_deg=3,
                  draw_mark=_draw_scuffed),
    ),
    voices=(Voice("lancaster-150-noise", "en-gb-x-gbclan", 150, 22.0),
            Voice("midlands-170-noise", "en-gb-x-gbcwmd", 170, 26.0), Voice("en-135", "en", 135)),
    urgent=Delivery((185, 215), (58, 72), (60, 85), (125, 155)),
    calm=Delivery((120, 145), (34, 46), (25, 40), (70, 90)),
    sounds=Sounds(beep_hz=(2000, 2500), beep_on_s=0.25, beep_period_s=0.8, siren_hz=(1200, 2100),
                  siren_period_s=(0.7, 1.0), whine_hz=(2600, 3600), alarm_db=(-16, -10), whine_db=(-26, -20)),
    finishes=(Finish(1.2, 12.0, streak=4.0), Finish(3.5, 11.0)),
)
"""The sealed held-out set (see the module docstring)."""
