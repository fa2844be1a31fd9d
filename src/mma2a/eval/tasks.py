"""The CrossModal task set: customer-service tasks whose answers need what the media contain.

Each task is a report (text, ending with a question), a drawn photo and/or a synthesized
voice note, and a gold answer. The set is generated from a seed and is the same for the
same seed and count. Categories and the kinds of question in each:

- product-defect: where the crack is (3x3 grid), how many dents, whether the delivered
  colour matches the ordered one (a hex colour; mismatches are sometimes a near shade).
- troubleshooting: which subsystem's status light is red (the manual lists them left to
  right), whether a light means a warning or a failure (amber or red).
- voice-complaint: what the caller asks for, which part they name (spoken only).
- mixed: action from the voice note plus the serial on the photo's QR label; which serial
  belongs to the cracked unit on a shelf photo; the part named by voice plus whether the
  photo shows damage.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..agents.questions import GRID, SIDES, THINGS
from ..errors import InvalidParams
from . import media
from .media import SETS as DEVELOPMENT_SETS
from .media import Finish, Label, Mark, Sound, Utterance, Variation, VariationSet, Voice

CATEGORIES: dict[str, tuple[str, ...]] = {
    "product-defect": ("location", "count", "colour_match"),
    "troubleshooting": ("status_light", "severity"),
    "voice-complaint": ("request", "part"),
    "mixed": ("label_action", "damaged_unit", "confirm"),
    "prosody": ("urgency", "question_rise"),
    "sound": ("alarm", "whine", "silence"),
    "image-detail": ("shade", "texture", "label_side"),
}

SIGNAL_KINDS = frozenset(CATEGORIES["prosody"] + CATEGORIES["sound"] + CATEGORIES["image-detail"])
"""Kinds whose answer lives in the signal, not in words: how a voice was said, the sounds behind it, image detail no
caption sentence states. The others are words-only kinds (a transcript or a caption can carry their answer)."""

NEEDS = {
    "location": "the defect's place (pixels)", "count": "the number of dents (pixels)",
    "colour_match": "the exact colour (pixels)", "status_light": "which light is red (its place)",
    "severity": "the light's colour", "request": "the spoken words", "part": "the spoken words",
    "label_action": "the QR label's text and the spoken request", "damaged_unit": "the crack's place and the QR labels",
    "confirm": "the spoken part and whether the photo shows damage",
    "urgency": "how the caller speaks (rate, pitch, loudness)", "question_rise": "the voice's pitch at the end",
    "alarm": "the sound behind the voice (beeps or a sweep)", "whine": "a steady tone behind the voice",
    "silence": "when the speech starts", "shade": "the exact colour (pixels)",
    "texture": "the surface's grain (pixels)", "label_side": "where the label is relative to the dent (pixels)",
}
"""What each kind of question needs from the media (documented in docs/evaluation.md)."""

SHADES: dict[str, tuple[tuple[str, media.RGB], ...]] = {
    "blue": (("ocean blue", (50, 95, 200)), ("sky blue", (95, 140, 225))),
    "red": (("signal red", (205, 45, 40)), ("coral red", (225, 85, 72))),
    "green": (("forest green", (40, 130, 60)), ("lime green", (90, 185, 70))),
    "grey": (("slate grey", (112, 118, 128)), ("silver", (170, 172, 176))),
    "yellow": (("lemon yellow", (230, 210, 50)), ("mustard yellow", (205, 175, 45))),
}
"""Product colours: two shades per colour word, told apart by pixels but not by a caption."""

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "June", "Kofi", "Lena")
PRODUCTS = ("coffee machine", "printer", "speaker", "washing machine", "monitor", "kettle", "air purifier", "router")
DEVICES = ("router", "server", "charger", "storage box", "heat pump", "alarm unit")
SUBSYSTEMS = ("power", "network", "storage", "cooling", "display", "sensor", "memory")
STATES = ("cracked", "broken", "loose", "bent", "scratched", "stained", "leaking", "noisy", "dead")
LIGHT = {"green": (40, 200, 70), "red": (232, 40, 35), "amber": (255, 172, 0)}


@dataclass(frozen=True)
class MediaFile:
    data: bytes
    media_type: str
    filename: str


@dataclass(frozen=True)
class CrossModalTask:
    """One task: the report text (with its question), optional photo and voice note, the gold answer."""

    id: str
    category: str
    kind: str
    text: str
    gold: str
    image: MediaFile | None = None
    audio: MediaFile | None = None
    spoken: str | None = None
    facts: dict[str, object] = field(default_factory=dict)
    variation_set: str = "development"
    conditions: tuple[str, ...] = ()
    """The photo's and the voice note's conditions, e.g. ("photo:blur", "voice:gb-160-noise")."""


Synthesize = Callable[[Utterance], bytes]
SETS = tuple(DEVELOPMENT_SETS)
"""The development sets' names (the sealed held-out set is added by the runner: `mma2a.eval.runner.SETS`)."""


def _photo_file(rng: random.Random, draw: Callable[[str], bytes]) -> MediaFile:
    fmt = "jpeg" if rng.random() < 0.7 else "png"
    return MediaFile(draw(fmt), f"image/{fmt}", f"photo.{'jpg' if fmt == 'jpeg' else 'png'}")


def _place_in_cell(rng: random.Random, cell: str, size: tuple[int, int]) -> tuple[float, float]:
    i = GRID.index(cell)
    row, col = divmod(i, 3)
    x0, y0, x1, y1 = media.object_box(*size)
    cw, ch = (x1 - x0) / 3, (y1 - y0) / 3
    return x0 + cw * (col + 0.5 + rng.uniform(-0.2, 0.2)), y0 + ch * (row + 0.5 + rng.uniform(-0.2, 0.2))


def _spread(rng: random.Random, n: int, size: tuple[int, int], min_gap: float) -> list[tuple[float, float]]:
    x0, y0, x1, y1 = media.object_box(*size)
    pts: list[tuple[float, float]] = []
    while len(pts) < n:
        p = (rng.uniform(x0 + 40, x1 - 40), rng.uniform(y0 + 40, y1 - 40))
        if all((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 >= min_gap ** 2 for q in pts):
            pts.append(p)
    return pts


def _product_colour(rng: random.Random) -> media.RGB:
    return rng.choice([c for shades in SHADES.values() for _, c in shades])


def _serial(rng: random.Random) -> str:
    return f"SN-{rng.randint(10000, 99999)}"


def _complaint(rng: random.Random, *, side: bool = True, request: str | None = None) -> tuple[str, str, str]:
    """A spoken complaint from the speech agent's grammar: (sentence, part, state)."""
    thing = rng.choice(THINGS)
    part = f"{rng.choice(SIDES)} {thing}" if side else thing
    state = rng.choice(STATES)
    sentence = f"the {part} is {state}"
    if request:
        sentence += f" and please {request} it"
    return sentence, part, state


def variation_set_named(name: str | VariationSet) -> VariationSet:
    if isinstance(name, VariationSet):
        return name
    if name not in DEVELOPMENT_SETS:
        raise InvalidParams(f"set: unknown variation set {name!r} (one of {', '.join(DEVELOPMENT_SETS)})", field="set")
    return DEVELOPMENT_SETS[name]


def make_task(index: int, kind: str, category: str, seed: int, synthesize: Synthesize,
              variation_set: str | VariationSet = "development") -> CrossModalTask:
    vs = variation_set_named(variation_set)
    pick = random.Random(f"condition:{vs.name}:{seed}:{index}")
    photo: Variation = pick.choice(vs.photos)
    spoken: Voice = pick.choice(vs.voices)
    task = _make_task(index, kind, category, seed, synthesize, vs, photo, spoken)
    conditions = ((f"photo:{photo.name}",) if task.image else ()) + ((f"voice:{spoken.name}",) if task.audio else ())
    return dataclasses.replace(task, variation_set=vs.name, conditions=conditions)


def _make_task(index: int, kind: str, category: str, seed: int, synthesize: Synthesize,
               vs: VariationSet, photo_variation: Variation, speaker: Voice) -> CrossModalTask:
    rng = random.Random(f"{vs.seeds}:{seed}:{index}")
    name, product = rng.choice(NAMES), rng.choice(PRODUCTS)
    tid = f"{vs.ids}{index:03d}-{kind}"
    size = (640, 480)

    def voice(sentence: str, **how: Any) -> MediaFile:
        return MediaFile(synthesize(Utterance(sentence, speaker, **how)), "audio/wav", "voice-note.wav")

    def _photo(rng: random.Random, draw: Callable[..., bytes]) -> MediaFile:
        return _photo_file(rng, lambda fmt: draw(fmt, photo_variation))

    if kind in SIGNAL_KINDS:
        return _signal_task(tid, category, kind, rng, vs, name, product, voice, _photo)
    if kind == "location":
        cell = rng.choice(GRID)
        x, y = _place_in_cell(rng, cell, size)
        colour = _product_colour(rng)
        hint = f", at the {cell} of the panel" if rng.random() < 0.3 else ""
        text = (f"{name} writes: my {product} arrived with a crack in its front panel{hint}. A photo is attached. "
                "Question: where on the front panel is the crack? Answer with its place on a three by three grid.")
        image = _photo(rng, lambda fmt, v: media.product_photo(rng, colour, [Mark("crack", x, y)], fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, cell, image=image, facts={"hint": bool(hint)})
    if kind == "count":
        n = rng.randint(1, 6)
        colour = _product_colour(rng)
        marks = [Mark("dent", x, y) for x, y in _spread(rng, n, size, 80)]
        text = (f"{name} writes: the {product} was delivered with dents in its front panel; photo attached. "
                "Question: how many dents are there? Answer with a number.")
        image = _photo(rng, lambda fmt, v: media.product_photo(rng, colour, marks, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, str(n), image=image)
    if kind == "colour_match":
        family = rng.choice(sorted(SHADES))
        shade_name, ordered = rng.choice(SHADES[family])
        roll = rng.random()
        if roll < 0.5:
            delivered, how = ordered, "same"
        elif roll < 0.75:
            delivered, how = next(c for n_, c in SHADES[family] if n_ != shade_name), "near shade"
        else:
            other = rng.choice(sorted(set(SHADES) - {family}))
            delivered, how = rng.choice(SHADES[other])[1], "other colour"
        hexcode = "#%02x%02x%02x" % ordered
        text = (f"{name} writes: I ordered the {product} in {shade_name} ({hexcode}) and I think the wrong colour came; "
                "photo attached. Question: does the delivered colour match the order? Answer yes or no.")
        image = _photo(rng, lambda fmt, v: media.product_photo(rng, delivered, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, "yes" if delivered == ordered else "no", image=image,
                              facts={"delivered": how})
    if kind == "status_light":
        n = rng.randint(3, 5)
        order = rng.sample(SUBSYSTEMS, n)
        fault = rng.randrange(n)
        device = rng.choice(DEVICES)
        listed = ", ".join(order[:-1]) + " and " + order[-1]
        text = (f"{name} writes: my {device} stopped working and one status light turned red; photo attached. "
                f"The manual says: the status lights are, from left to right: {listed}; a red light marks the fault. "
                "Question: which subsystem has the fault?")
        lights = [LIGHT["red"] if i == fault else LIGHT["green"] for i in range(n)]
        image = _photo(rng, lambda fmt, v: media.status_panel(rng, lights, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, order[fault], image=image)
    if kind == "severity":
        light = rng.choice(("amber", "red"))
        device = rng.choice(DEVICES)
        rules = ["an amber light means a warning", "a red light means a failure"]
        rng.shuffle(rules)
        text = (f"{name} writes: a light came on at the front of my {device}; photo attached. "
                f"The manual says: {rules[0]} and {rules[1]}. Question: is it a warning or a failure?")
        image = _photo(rng, lambda fmt, v: media.status_panel(rng, [LIGHT[light]], fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, "warning" if light == "amber" else "failure", image=image)
    if kind == "request":
        request = rng.choice(("fix", "replace", "refund", "check"))
        sentence, _, _ = _complaint(rng, request=request)
        if rng.random() < 0.4:
            sentence += " and it is urgent"
        text = f"{name} left a voice message about the {product} (attached). Question: what does the customer ask us to do?"
        return CrossModalTask(tid, category, kind, text, request, audio=voice(sentence), spoken=sentence)
    if kind == "part":
        sentence, part, _ = _complaint(rng)
        if rng.random() < 0.5:
            sentence += f" and it makes a {rng.choice(('noise', 'rattle', 'click', 'hum'))}"
        text = f"{name} left a voice message about the {product} (attached). Question: which part is affected?"
        return CrossModalTask(tid, category, kind, text, part, audio=voice(sentence), spoken=sentence)
    if kind == "label_action":
        request, serial = rng.choice(("fix", "replace", "refund", "check")), _serial(rng)
        sentence, _, _ = _complaint(rng, side=False, request=request)
        colour = _product_colour(rng)
        lx, ly = rng.uniform(200, 440), rng.uniform(140, 340)
        marks = [Mark("crack", 560 if lx < 320 else 90, ly)] if rng.random() < 0.5 else []
        text = (f"{name} sent a photo of the unit's label and a voice note about the {product}. "
                "Question: what should we do, and for which serial number? Answer with the action then the serial number.")
        image = _photo(rng, lambda fmt, v: media.product_photo(rng, colour, marks, [Label(serial, lx, ly)], fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, f"{request} {serial}", image=image, audio=voice(sentence),
                              spoken=sentence)
    if kind == "damaged_unit":
        n = rng.randint(2, 3)
        serials = [_serial(rng) for _ in range(n)]
        broken = rng.randrange(n)
        units = [(_product_colour(rng), serials[i], i == broken) for i in range(n)]
        sentence = f"the {rng.choice(THINGS)} is cracked and please replace it"
        text = (f"{name} runs a shop and sent a photo of the {product}s on the shelf and a voice note. "
                "Question: which serial number belongs to the damaged unit?")
        image = _photo(rng, lambda fmt, v: media.units_photo(rng, units, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, serials[broken], image=image, audio=voice(sentence), spoken=sentence)
    if kind == "confirm":
        sentence, part, _ = _complaint(rng)
        damaged = rng.random() < 0.5
        colour = _product_colour(rng)
        marks = [Mark("crack", *_place_in_cell(rng, rng.choice(GRID), size))] if damaged else []
        text = (f"{name} reports damage to the {product} in a voice note and sent a photo. Question: which part does the "
                "customer name, and does the photo show damage? Answer with the part then yes or no.")
        image = _photo(rng, lambda fmt, v: media.product_photo(rng, colour, marks, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, f"{part} {'yes' if damaged else 'no'}", image=image,
                              audio=voice(sentence), spoken=sentence)
    raise InvalidParams(f"kind: unknown task kind {kind!r}", field="kind")


def schedule(n: int) -> list[tuple[str, str]]:
    """(category, kind) for tasks 0..n-1: categories in turn, each cycling through its kinds."""
    cats = list(CATEGORIES)
    seen = dict.fromkeys(cats, 0)
    out = []
    for i in range(n):
        cat = cats[i % len(cats)]
        kinds = CATEGORIES[cat]
        out.append((cat, kinds[seen[cat] % len(kinds)]))
        seen[cat] += 1
    return out


def _signal_task(tid: str, category: str, kind: str, rng: random.Random, vs: VariationSet, name: str, product: str,
                 voice: Callable[..., MediaFile], photo: Callable[[random.Random, Callable[..., bytes]], MediaFile]
                 ) -> CrossModalTask:
    """A task whose answer lives in the signal (`SIGNAL_KINDS`): the words said or shown are the same whatever the
    answer."""
    said = f"{name} left a voice message about the {product} (attached)."
    if kind == "urgency":
        urgent = rng.random() < 0.5
        how = vs.urgent if urgent else vs.calm
        sentence, _, _ = _complaint(rng)
        audio = voice(sentence, rate_wpm=rng.randint(*how.rate_wpm), pitch=rng.randint(*how.pitch),
                      pitch_range=rng.randint(*how.pitch_range), volume=rng.randint(*how.volume))
        text = f"{said} Question: is the caller urgent or calm? Answer urgent or calm."
        return CrossModalTask(tid, category, kind, text, "urgent" if urgent else "calm", audio=audio, spoken=sentence)
    if kind == "question_rise":
        asks = rng.random() < 0.5
        sentence, _, _ = _complaint(rng)
        sentence += "?" if asks else "."
        text = f"{said} Question: did the caller ask a question or state a fact? Answer question or statement."
        return CrossModalTask(tid, category, kind, text, "question" if asks else "statement", audio=voice(sentence),
                              spoken=sentence)
    s = vs.sounds
    if kind == "alarm":
        which = rng.choice(("beep", "siren", "none"))
        level = rng.uniform(*s.alarm_db)
        sound = (Sound("beep", rng.uniform(*s.beep_hz), level, period_s=s.beep_period_s, on_s=s.beep_on_s)
                 if which == "beep" else
                 Sound("siren", s.siren_hz[0], level, hz2=s.siren_hz[1], period_s=rng.uniform(*s.siren_period_s))
                 if which == "siren" else None)
        sentence, _, _ = _complaint(rng)
        text = (f"{name} called from the plant floor about the {product}; an alarm may be sounding behind them (voice "
                "message attached). Question: which alarm is sounding: beeping, a siren, or none? "
                "Answer beep, siren or none.")
        return CrossModalTask(tid, category, kind, text, which, audio=voice(sentence, sound=sound), spoken=sentence)
    if kind == "whine":
        present = rng.random() < 0.5
        sound = Sound("whine", rng.uniform(*s.whine_hz), rng.uniform(*s.whine_db)) if present else None
        sentence, _, _ = _complaint(rng)
        text = f"{said} Question: is a machine's high whine audible behind the caller? Answer yes or no."
        return CrossModalTask(tid, category, kind, text, "yes" if present else "no",
                              audio=voice(sentence, sound=sound), spoken=sentence)
    if kind == "silence":
        wait = rng.randint(*s.silence_s)
        sentence = rng.choice(("yes it is still under warranty", "no I bought it two years ago",
                               "I think so but I lost the receipt", "yes I have the receipt here"))
        text = (f"We asked {name} on the phone whether the {product} is still under warranty; the recording (attached) "
                "starts as we finished asking. Question: how many seconds of silence passed before the caller "
                "answered? Answer with a whole number.")
        return CrossModalTask(tid, category, kind, text, str(wait),
                              audio=voice(sentence, lead_s=wait + rng.uniform(-0.25, 0.25)), spoken=sentence)
    if kind == "shade":
        family = rng.choice(sorted(SHADES))
        shades = list(SHADES[family])
        rng.shuffle(shades)
        (ordered, o_rgb), (other, x_rgb) = shades
        delivered, d_rgb = (ordered, o_rgb) if rng.random() < 0.5 else (other, x_rgb)
        text = (f"{name} writes: I ordered the {product} in {ordered} ({_hex(o_rgb)}); the other stock shade is {other} "
                f"({_hex(x_rgb)}). Photo attached. Question: which shade was delivered? Answer with the shade's name.")
        image = photo(rng, lambda fmt, v: media.product_photo(rng, d_rgb, fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, delivered, image=image)
    if kind == "texture":
        rough = rng.random() < 0.5
        finish: Finish | None = rng.choice(vs.finishes) if rough else None
        colour = _product_colour(rng)
        text = (f"{name} writes: I am not sure which finish of the {product} was delivered; photo attached. "
                "Question: is the front panel's finish rough or smooth? Answer rough or smooth.")
        image = photo(rng, lambda fmt, v: media.product_photo(rng, colour, fmt=fmt, variation=v, finish=finish))
        return CrossModalTask(tid, category, kind, text, "rough" if rough else "smooth", image=image)
    if kind == "label_side":
        side = rng.choice(("above", "below", "left", "right"))
        mx, my = rng.uniform(230, 410), rng.uniform(200, 260)
        lx, ly = {"above": (mx + rng.uniform(-25, 25), my - 125), "below": (mx + rng.uniform(-25, 25), my + 115),
                  "left": (mx - 165, my + rng.uniform(-25, 25)), "right": (mx + 165, my + rng.uniform(-25, 25))}[side]
        colour = _product_colour(rng)
        text = (f"{name} writes: the {product} came with a dent and a small label on its front; photo attached. "
                "Question: where is the small label relative to the dent: above, below, left or right of it?")
        image = photo(rng, lambda fmt, v: media.product_photo(rng, colour, [Mark("dent", mx, my)],
                                                              [Label(_serial(rng), lx, ly)], fmt=fmt, variation=v))
        return CrossModalTask(tid, category, kind, text, side, image=image)
    raise InvalidParams(f"kind: unknown task kind {kind!r}", field="kind")


def _hex(rgb: media.RGB) -> str:
    return "#%02x%02x%02x" % rgb


def generate_tasks(n: int = 50, seed: int = 7, *, variation_set: str | VariationSet = "development",
                   synthesize: Callable[[list[Utterance]], list[bytes]] | None = None) -> list[CrossModalTask]:
    """`n` tasks for `seed` in a variation set (a development set's name, or a `VariationSet`): the same media bytes
    and answers every time (and the first k of n are the k-task set).

    Voice notes are synthesized together, in generation order, by `synthesize` (default: eSpeak NG
    in a fresh process with the room around it — see `media.speak`).
    """
    if n < 1:
        raise InvalidParams(f"tasks: must be at least 1, got {n}", field="tasks")
    vs = variation_set_named(variation_set)
    if synthesize is None:
        def synthesize(items: list[Utterance]) -> list[bytes]:
            return media.speak(items, seed)
    plan = schedule(n)
    sentences: list[Utterance] = []

    def record(utterance: Utterance) -> bytes:
        sentences.append(utterance)
        return b""

    drafts = [make_task(i, kind, cat, seed, record, vs) for i, (cat, kind) in enumerate(plan)]
    audio = iter(synthesize(sentences))
    out = []
    for task in drafts:
        if task.audio is not None:
            task = dataclasses.replace(task, audio=dataclasses.replace(task.audio, data=next(audio)))
        out.append(task)
    return out
