"""Learned routing: among the agents that accept a part, the one whose ratings on the most similar past parts are best.

Pure, like the rest of routing. What was learned enters a decision as `Evidence`, an immutable
index the gateway swaps in after each rating (gateway/state/learning.py); a choice reads it and the
part, never a clock or a global. Its randomness (exploration) is drawn from a generator seeded
by the message id and the part index, so the same input gets the same choice.

- **Similar parts.** A part's *key* is what must be equal: its modality, language, detected
  objects and whether it carries codes. Parts with a sentence vector (text, and a transcript or
  OCR text where the gateway embeds one) are grouped further into *cells*: a rated part joins the
  nearest cell of its key whose leader vector is within `JOIN` (cosine), else it leads a new cell.
  A decision sums the ratings of the `NEAREST` cells nearest its vector with a cosine of at least
  `SIMILAR`; a part without a vector has one cell per key.
- **Ratings** are kept per (cell, owner, agent) as a Beta posterior (good = the sum of scores, n
  = ratings), for the rating client and for everyone (`*`). Old ratings fade: when an agent's
  ratings summed over a part's similar cells pass `WINDOW`, they are scaled back to it.
- **Changes are detected** (a non-stationary bandit by change detection and restart): each rating is
  tested, with the agent's recent ratings of similar parts, against what its records predicted (a
  Bayes factor, `EvidenceIndex._detect`); past `ALARM` the agent's records around those parts restart
  from the ratings since the change, under a new *epoch*, and a decision (or rating) that reads any
  cell of that epoch ignores the agent's older records: an agent that degrades on one topic loses its
  old lead across the topic within a few bad ratings, not only where the bad ratings fell.
- **The bandit rule**: optimistic greedy on the posterior mean (1 + good) / (2 + n) — an agent
  never rated there counts 1/2, so it is tried before agents rated worse — and, with probability
  `explore` (the rule's), a Thompson draw from each agent's Beta posterior instead. At most
  `explore` of choices depart from the greedy one. Ties keep capability order.
- **Bounds** (`EvidenceIndex`): at most `max_cells` cells (when full, the least recently rated
  eighth is evicted with its ratings), of which one client's ratings make at most `max_cells_per_owner`
  (a quarter; past it that client's own least recently rated cell goes), and `max_owners` owners per cell. A lookup is one matrix-vector product over
  the cells of the part's key (at most `max_cells` x the vector's dimension), whatever the number
  of past decisions.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..view import PartView

# numpy is imported where a vector is: a gateway whose parts carry no vectors never loads it

JOIN = 0.5
"""Cosine to a cell's leader at which a rated part joins that cell (else it leads a new one)."""
SIMILAR = 0.4
"""Cosine at which a cell counts as similar to a part being routed."""
NEAREST = 8
"""How many of the nearest similar cells a decision sums the ratings of."""
WINDOW = 8.0
"""Ratings kept per (cell, owner, agent): past it, good and n are scaled back to it (older ratings fade)."""
ALARM = math.log(30.0)
"""Change detection: the log of the Bayes factor for "the agent changed" past which its records restart (30: "very
strong" evidence on Jeffreys' scale)."""
WATCH = 32
"""Change detection: an agent's last ratings watched, per (owner, agent, key)."""
GOOD = 0.5
"""A rating of at least this is `good` in explanations."""
EVERYONE = "*"
"""The owner under which every client's ratings are summed (`feedback: shared`)."""

Key = tuple[Any, ...]
Tally = tuple[float, float]  # (good, n)
Record = tuple[float, float, int]  # (good, n, epoch): an agent's tally in a cell, and the detected change it dates from


class Watch:
    """An agent's last `WATCH` ratings (per owner and key), oldest first: each one's cell, score and the log of the
    probability its records gave that score; `rows` holds their vectors (row i: rating i), None for parts without."""

    __slots__ = ("ratings", "rows")

    def __init__(self) -> None:
        self.ratings: list[tuple[int, float, float]] = []
        self.rows: Any = None

    def add(self, cell: int, vector: Any, score: float, log_p: float) -> None:
        if vector is not None and (self.rows is None or self.rows.shape[1] != vector.shape[0]):
            import numpy as np

            self.ratings, self.rows = [], np.zeros((WATCH, vector.shape[0]), dtype=np.float32)
        elif vector is None and self.rows is not None:
            self.ratings, self.rows = [], None
        if len(self.ratings) == WATCH:
            del self.ratings[0]
            if self.rows is not None:
                self.rows[:-1] = self.rows[1:]
        if self.rows is not None:
            self.rows[len(self.ratings)] = vector
        self.ratings.append((cell, score, log_p))

    def near(self, cell: int, vector: Any) -> list[int]:
        """The watched ratings of parts similar to this one (cosine >= `SIMILAR`; the same cell without vectors)."""
        if self.rows is None or vector is None:
            return [i for i, r in enumerate(self.ratings) if r[0] == cell]
        cos = self.rows[: len(self.ratings)] @ vector
        return [int(i) for i in (cos >= SIMILAR).nonzero()[0]]

    def drop(self, gone: list[int]) -> None:
        out = set(gone)
        keep = [i for i in range(len(self.ratings)) if i not in out]
        self.ratings = [self.ratings[i] for i in keep]
        if self.rows is not None:
            self.rows[: len(keep)] = self.rows[keep]



def part_key(part: PartView) -> Key:
    """What must be equal for two parts to be similar: modality, language, objects, codes (and the vector's model)."""
    f = part.features
    objects = f.get("objects") if f else None
    objs = tuple(sorted({str(o) for o in objects})[:8]) if isinstance(objects, list) else ()
    codes = bool(f.get("codes")) if f else False
    language = f.get("language") if f else None
    model = part.embedding_model if part.embedding is not None else None
    return (part.modality.essence, language if isinstance(language, str) else None, objs, codes, model)


def seed_of(message_id: str, part: int) -> int:
    """The exploration draw's seed for one part of one message (the same message, the same draw)."""
    return int.from_bytes(hashlib.blake2b(f"{message_id}\x1f{part}".encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Cells:
    """The cells of one key: their leader vectors (rows, read-only) and ids."""

    leaders: Any  # np.ndarray (n, d) float32, not written after it is published
    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What was learned, as a decision reads it: cells by key, and tallies by cell, owner and agent. Never changed
    once made (`EvidenceIndex.freeze` makes the next one)."""

    cells: Mapping[Key, Cells]
    plain: Mapping[Key, int]  # the one cell of a key whose parts have no vector
    tallies: Mapping[int, Mapping[str, Mapping[str, Record]]]  # cell -> owner -> agent -> (good, n, epoch)
    ratings: int = 0  # ratings taken in so far (explanations, metrics)

    def similar(self, key: Key, vector: Any) -> tuple[tuple[int, ...], float]:
        """The cells similar to a part (ids, best cosine); () when none."""
        if vector is None:
            cell = self.plain.get(key)
            return ((cell,), 1.0) if cell is not None else ((), 0.0)
        cells = self.cells.get(key)
        if cells is None or cells.leaders.shape[1] != vector.shape[0]:
            return (), 0.0
        import numpy as np

        cos = cells.leaders @ vector
        if len(cos) > NEAREST:
            top = np.argpartition(-cos, NEAREST)[:NEAREST]
        else:
            top = np.arange(len(cos))
        keep = [int(i) for i in top if cos[i] >= SIMILAR]
        if not keep:
            return (), float(cos.max()) if len(cos) else 0.0
        return tuple(cells.ids[i] for i in keep), float(max(cos[i] for i in keep))

    def tally(self, cells: Sequence[int], owner: str) -> dict[str, Tally]:
        """Each agent's (good, n) summed over `cells`, as rated by `owner` (`EVERYONE`: by every client): only its
        records of the latest change detected among them (older ones describe the agent before it changed)."""
        out: dict[str, Tally] = {}
        latest: dict[str, int] = {}
        for cell in cells:
            for agent, (good, n, epoch) in self.tallies.get(cell, {}).get(owner, {}).items():
                last = latest.get(agent, -1)
                if epoch > last:
                    latest[agent], out[agent] = epoch, (good, n)
                elif epoch == last:
                    g0, n0 = out[agent]
                    out[agent] = (g0 + good, n0 + n)
        return out


NO_EVIDENCE = Evidence({}, {}, {})


class LearnInput(NamedTuple):
    """What a learned choice reads of one part besides the candidates: the evidence, the part's key and vector, the
    sending client (None: anonymous) and the exploration seed."""

    evidence: Evidence
    key: Key
    vector: Any
    owner: str
    seed: int


class LearnedChoice(NamedTuple):
    """The agent chosen, whether it was an exploring draw, and the evidence in words (explanations, history)."""

    agent: str
    explored: bool
    note: str


def choose(inp: LearnInput, candidates: Sequence[str], explore: float, shared: bool) -> LearnedChoice | None:
    """The learned choice among `candidates` (capability order, best first); None without evidence on any of them
    (the caller falls back to capability routing)."""
    cells, cos = inp.evidence.similar(inp.key, inp.vector)
    if not cells:
        return None
    tallies = inp.evidence.tally(cells, EVERYONE if shared else inp.owner)
    if not any(a in tallies for a in candidates):
        return None
    rng = random.Random(inp.seed)
    explored = rng.random() < explore
    best, best_value = candidates[0], -1.0
    for agent in candidates:
        good, n = tallies.get(agent, (0.0, 0.0))
        value = rng.betavariate(1.0 + good, 1.0 + n - good) if explored else (1.0 + good) / (2.0 + n)
        if value > best_value:
            best, best_value = agent, value
    total = sum(n for _, n in tallies.values())
    shown = ", ".join(f"{a} {_count(tallies[a][0])}/{_count(tallies[a][1])} good" if a in tallies else f"{a} untried"
                      for a in candidates)
    whose = "everyone's" if shared else "own"
    note = (f"learned: {_count(total)} similar parts ({len(cells)} cell{'s' if len(cells) > 1 else ''}, cos {cos:.2f}, "
            f"{whose} ratings): {shown}; chose {best}" + (" (explored)" if explored else ""))
    return LearnedChoice(best, explored, note)


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _count(x: float) -> str:
    return str(round(x))


class EvidenceIndex:
    """The mutable side: ratings come in (`rate`), `freeze` makes the next immutable `Evidence` (sharing what did not
    change). Bounded: `max_cells` cells (least recently rated out, with their tallies), `max_owners` per cell."""

    def __init__(self, *, max_cells: int = 4096, max_owners: int = 256, max_cells_per_owner: int | None = None) -> None:
        self.max_cells = max_cells
        self.max_owners = max_owners
        # the cells one client's ratings may make (a quarter by default): past it its own least recently rated go,
        # so a client rating ever-new parts cannot push every other client's evidence out (anonymous "" is exempt:
        # without identities there is no one else to protect)
        self.max_cells_per_owner = max(1, max_cells // 4) if max_cells_per_owner is None else max_cells_per_owner
        self._made_by: dict[int, str] = {}  # cell -> the owner whose rating made it
        self._made: dict[str, int] = {}  # owner -> how many of the cells it made are kept
        self._rows: dict[Key, tuple[Any, list[int]]] = {}  # key -> (buffer, ids); rows [:len(ids)] are leaders
        self._cells: dict[Key, Cells] = {}
        self._plain: dict[Key, int] = {}
        self._key_of: OrderedDict[int, Key] = OrderedDict()  # cell -> its key, least recently rated first
        self._tallies: dict[int, dict[str, dict[str, Record]]] = {}
        self._next = 0
        self._ratings = 0
        self._frozen = NO_EVIDENCE
        self._dirty: set[int] = set()  # cells rated or forgotten since the last `freeze`
        # change detection: (owner, agent, key) -> its last ratings, least recently rated first (at most max_cells // 16)
        self._watch: OrderedDict[tuple[str, str, Key], Watch] = OrderedDict()
        self._epoch = 0
        self.restarts = 0

    def __len__(self) -> int:
        return len(self._key_of)

    @property
    def watched(self) -> int:
        """How many (owner, agent, key) have their recent ratings watched for a change (at most `max_cells` // 16)."""
        return len(self._watch)

    def rate(self, key: Key, vector: Any, owner: str, agent: str, score: float) -> int:
        """Take one rating (0..1) of `agent` on a part of `key` (and `vector`) sent by `owner`; return its cell.

        What a decision on this part would read is watched: records older than the agent's latest detected change
        among the part's similar cells are dropped; the rating is tested for a change (`_detect`, which may restart the
        agent's records around it); past `WINDOW` ratings the agent's records there are scaled back; then it is added."""
        if vector is not None:
            import numpy as np

            vector = np.asarray(vector, dtype=np.float32)
        cell = self._cell(key, vector, owner)
        self._key_of.move_to_end(cell)
        near = {cell, *self._near(key, vector)}
        for who in (owner, EVERYONE) if owner != EVERYONE else (EVERYONE,):
            epoch, good, n = self._current(near, who, agent)
            epoch = self._detect(who, agent, key, vector, cell, (1.0 + good) / (2.0 + n), score) or epoch
            kept = [(c, self._tallies[c][who]) for c in near if agent in self._tallies.get(c, {}).get(who, {})]
            total = sum(agents[agent][1] for _, agents in kept)
            if total + 1.0 > WINDOW:
                keep = (WINDOW - 1.0) / total
                for c, agents in kept:
                    g, m, e = agents[agent]
                    agents[agent] = (g * keep, m * keep, e)
                    self._dirty.add(c)
            self._add(cell, who, agent, score, epoch)
        owners = self._tallies[cell]
        while len(owners) > self.max_owners:
            oldest = next(w for w in owners if w != EVERYONE)
            del owners[oldest]
        self._ratings += 1
        self._dirty.add(cell)
        return cell

    def _current(self, near: set[int], who: str, agent: str) -> tuple[int, float, float]:
        """The agent's latest epoch among `near` and its (good, n) there; its older records in `near` are dropped."""
        found = [(c, self._tallies[c][who]) for c in near if agent in self._tallies.get(c, {}).get(who, {})]
        epoch = max((agents[agent][2] for _, agents in found), default=0)
        good = n = 0.0
        for c, agents in found:
            g, m, e = agents[agent]
            if e < epoch:
                del agents[agent]
                self._dirty.add(c)
            else:
                good, n = good + g, n + m
        return epoch, good, n

    def _add(self, cell: int, who: str, agent: str, score: float, epoch: int) -> None:
        owners = self._tallies.setdefault(cell, {})
        agents = owners.pop(who, None) or {}
        owners[who] = agents  # most recently rated last
        g, m, e = agents.get(agent, (0.0, 0.0, epoch))
        agents[agent] = (g + score, m + 1.0, e) if e == epoch else (score, 1.0, epoch)
        self._dirty.add(cell)

    def _detect(self, who: str, agent: str, key: Key, vector: Any, cell: int, predicted: float,
                score: float) -> int | None:
        """Test `agent`'s recent ratings near this one for a change; on one, restart its records around them and
        return the new epoch.

        The agent's last `WATCH` ratings (per owner and key) are kept, each with the probability its records gave
        it when it came (`predicted`: the posterior mean a decision read there). Those whose parts are similar to
        this one (cosine >= `SIMILAR`: where its records predict alike), this one last, are tested: for each
        suffix (a change just before it) the Bayes factor of "the agent now answers well at some other rate
        (uniform prior)" against "its ratings went as its records predicted" is B(1 + good, 1 + bad) / the product
        of the predicted probabilities of the suffix's ratings. Past e^`ALARM` the change is taken, from the suffix
        with the largest factor."""
        k = (who, agent, key)
        watch = self._watch.pop(k, None) or Watch()
        p = min(max(predicted, 1e-6), 1.0 - 1e-6)
        watch.add(cell, vector, score, score * math.log(p) + (1.0 - score) * math.log(1.0 - p))
        local = watch.near(cell, vector)
        if not local or local[-1] != len(watch.ratings) - 1:  # this one (a zero vector is similar to nothing)
            local.append(len(watch.ratings) - 1)
        best, start, good, m, null = 0.0, -1, 0.0, 0.0, 0.0
        for j in range(len(local) - 1, -1, -1):
            _, score_j, log_p = watch.ratings[local[j]]
            good, m, null = good + score_j, m + 1.0, null + log_p
            log_bf = _lbeta(1.0 + good, 1.0 + m - good) - null
            if log_bf > best:
                best, start = log_bf, j
        epoch = None
        if best > ALARM:
            run = local[start:]
            epoch = self._restart(who, agent, key, watch, run)
            watch.drop(run)
        self._watch[k] = watch
        while len(self._watch) > max(1, self.max_cells // 16):  # each holds up to WATCH vectors
            self._watch.popitem(last=False)
        return epoch

    def _restart(self, who: str, agent: str, key: Key, watch: Watch, run: list[int]) -> int:
        """A detected change: `agent`'s records in every cell of the key similar to a part of `run` (the ratings since
        the change) are dropped, and the run's earlier ratings make its records there, of a new epoch (returned): a
        decision or rating reading any of these cells then reads only the agent's records from after the change."""
        self._epoch += 1
        region = {watch.ratings[i][0] for i in run}
        buffer, ids = self._rows.get(key, (None, []))
        if watch.rows is not None and buffer is not None and ids and buffer.shape[1] == watch.rows.shape[1]:
            cos = buffer[: len(ids)] @ watch.rows[run].T  # every cell against each part of the run
            region.update(ids[int(i)] for i in (cos >= SIMILAR).any(axis=1).nonzero()[0])
        for c in region:
            agents = self._tallies.get(c, {}).get(who)
            if agents is not None and agents.pop(agent, None) is not None:
                self._dirty.add(c)
        for cell, score, _ in (watch.ratings[i] for i in run[:-1]):  # the last is the rating being taken
            if cell in self._key_of:
                self._add(cell, who, agent, score, self._epoch)
        self.restarts += 1
        return self._epoch

    def _near(self, key: Key, vector: Any) -> list[int]:
        """The cells a decision on a part of `key` and `vector` sums (as `Evidence.similar`)."""
        if vector is None:
            return []
        buffer, ids = self._rows.get(key, (None, []))
        if buffer is None or not ids or buffer.shape[1] != vector.shape[0]:
            return []
        import numpy as np

        cos = buffer[: len(ids)] @ vector
        top = np.argpartition(-cos, NEAREST)[:NEAREST] if len(cos) > NEAREST else np.arange(len(cos))
        return [ids[int(i)] for i in top if cos[i] >= SIMILAR]

    def _cell(self, key: Key, vector: Any, owner: str) -> int:
        if vector is None:
            cell = self._plain.get(key)
            if cell is None:
                cell = self._new_cell(key, owner)
                self._plain[key] = cell
            return cell
        import numpy as np

        buffer, ids = self._rows.get(key, (None, []))
        if buffer is not None and ids and buffer.shape[1] == vector.shape[0]:
            cos = buffer[: len(ids)] @ vector
            best = int(np.argmax(cos))
            if cos[best] >= JOIN:
                return ids[best]
        elif buffer is not None and buffer.shape[1] != vector.shape[0]:  # another model's vectors: start over
            self._forget(list(ids))
        cell = self._new_cell(key, owner)  # may evict cells of this key: its rows are read after
        buffer, ids = self._rows.get(key, (None, []))
        if buffer is None or len(ids) == len(buffer):  # a new buffer: published views keep the old one
            grown = np.zeros((max(8, 2 * len(ids)), vector.shape[0]), dtype=np.float32)
            if ids:
                grown[: len(ids)] = buffer[: len(ids)]
            buffer = grown
        buffer[len(ids)] = vector  # past every published view's rows
        ids = [*ids, cell]
        self._rows[key] = (buffer, ids)
        self._publish_key(key)
        return cell

    def _new_cell(self, key: Key, owner: str) -> int:
        mine = owner not in ("", EVERYONE)
        if mine and self._made.get(owner, 0) >= self.max_cells_per_owner:  # the owner's own least recently rated
            self._forget([next(c for c in self._key_of if self._made_by.get(c) == owner)])
        if len(self._key_of) >= self.max_cells:  # the least recently rated eighth out at once: one copy per key
            self._forget(list(itertools.islice(self._key_of, max(1, self.max_cells // 8))))
        cell = self._next
        self._next += 1
        self._key_of[cell] = key
        if mine:
            self._made_by[cell] = owner
            self._made[owner] = self._made.get(owner, 0) + 1
        return cell

    def _forget(self, cells: list[int]) -> None:
        """Drop `cells` with their tallies; each key's rows are copied once (published views keep the old ones)."""
        by_key: dict[Key, set[int]] = {}
        for cell in cells:
            key = self._key_of.pop(cell)
            self._tallies.pop(cell, None)
            maker = self._made_by.pop(cell, None)
            if maker is not None:
                left = self._made.pop(maker) - 1
                if left:
                    self._made[maker] = left
            self._dirty.add(cell)
            if self._plain.get(key) == cell:
                del self._plain[key]
            else:
                by_key.setdefault(key, set()).add(cell)
        import numpy as np

        for key, gone in by_key.items():
            buffer, ids = self._rows[key]
            keep = [j for j, c in enumerate(ids) if c not in gone]
            if not keep:
                del self._rows[key]
                self._cells.pop(key, None)
                continue
            fresh = np.zeros_like(buffer)
            fresh[: len(keep)] = buffer[keep]
            self._rows[key] = (fresh, [ids[j] for j in keep])
            self._publish_key(key)

    def _publish_key(self, key: Key) -> None:
        found = self._rows.get(key)
        if found is None:
            return
        buffer, ids = found
        view = buffer[: len(ids)]
        view = view.view()
        view.flags.writeable = False
        self._cells[key] = Cells(view, tuple(ids))

    def freeze(self) -> Evidence:
        """The evidence as of now: the tallies of cells rated since the last one copied, the others shared with it
        (cost: the number of cells, plus the owners of the cells rated); cells' rows shared, never written again."""
        tallies = dict(self._frozen.tallies)
        for cell in self._dirty:
            owners = self._tallies.get(cell)
            if owners is None:
                tallies.pop(cell, None)
            else:
                tallies[cell] = {who: dict(agents) for who, agents in owners.items()}
        self._dirty.clear()
        self._frozen = Evidence(dict(self._cells), dict(self._plain), tallies, self._ratings)
        return self._frozen
