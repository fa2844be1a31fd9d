"""Static sentence vectors distilled from the shipped all-MiniLM-L6-v2 (the Model2Vec method).

Every word piece of MiniLM's WordPiece vocabulary is run through the ONNX model once, alone
(`[CLS] piece [SEP]`, mean-pooled as MiniLM pools a sentence); the 30,522 rows are centred on
the mean word row and each is weighted by log(1 + frequency rank)^2 (the uncased BERT vocabulary
lists whole words by frequency from "the" on), so that "the", "my" and "?" count little. A
sentence's vector is then the mean of its pieces' rows: tens of µs on one core, where the
transformer takes milliseconds. Accuracy on this project's paraphrase set and its held-out set
is in docs/features.md; how the recipe was picked, in docs/benchmarks.md.

The table is derived, never downloaded: built from the model file of the installed package (about
30 s of CPU on one core), stored in a cache directory under a name holding the model file's
digest (a new model file gets a new table), written atomically, and read back in well under a second on
every later start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .sentence import DIMENSION, TableEncoder, model_files

log = logging.getLogger("mma2a.features")

STATIC_NAME = "all-minilm-l6-v2-static"
WORDS_FROM = 1996
"""The id of "the" in the uncased BERT vocabulary: from here on whole words and pieces are listed by frequency."""
DISTIL_BATCH = 512
"""Single-piece inputs per model run while the table is built."""
MAX_PIECES = 128
"""A text past this many word pieces is cut, as MiniLM cuts it (and a text of new words costs at most this many
tokenizer calls)."""
RANK_POWER = 2.0
"""Row weight: log(1 + frequency rank) to this power."""
RECIPE = 1
"""The version of the recipe above, in the table's file name: a changed recipe builds a new table."""
CACHE_ENV = "MMA2A_DATA_DIR"

_tables: dict[Path, Any] = {}
"""Tables loaded in this process, by file: every embedder of one cache dir shares one (47 MB as float32)."""
_tables_lock = threading.Lock()


_digests: dict[tuple[str, int, int], str] = {}


def model_digest(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the model file (names the table it gives); remembered for the
    file's path, size and modification time (hashing 23 MB takes tens of ms)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    found = _digests.get(key)
    if found is None:
        found = _digests[key] = _sha256_head(path)
    return found


def _sha256_head(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    """Where a process without a gateway config keeps the table: `$MMA2A_DATA_DIR/models`, else ./mma2a-data/models
    (the gateway's default data dir)."""
    return Path(os.environ.get(CACHE_ENV) or "./mma2a-data") / "models"


def distil_rows(session: Any, pieces: Sequence[int], *, batch: int = DISTIL_BATCH) -> Any:
    """MiniLM's mean-pooled output for each word piece alone (`[CLS] piece [SEP]`): a (len(pieces), 384) float32 array."""
    import numpy as np

    ids_all = np.asarray(pieces, dtype=np.int64)
    out = np.zeros((len(ids_all), DIMENSION), np.float32)
    for a in range(0, len(ids_all), batch):
        ids = ids_all[a: a + batch]
        x = np.empty((len(ids), 3), np.int64)
        x[:, 0], x[:, 1], x[:, 2] = 101, ids, 102  # [CLS] piece [SEP]
        hidden = session.run(None, {"input_ids": x, "attention_mask": np.ones_like(x), "token_type_ids": np.zeros_like(x)})[0]
        out[a: a + len(ids)] = hidden.mean(axis=1)
    return out


def finish_table(rows: Any) -> Any:
    """The static table from the raw rows of the whole vocabulary: centred on the mean word row (what every word
    shares says nothing of a sentence, and without it every cosine is high), weighted by frequency rank;
    float16 on disk."""
    import numpy as np

    raw = rows.astype(np.float64)
    table = raw - raw[WORDS_FROM:].mean(axis=0)
    rank = np.maximum(np.arange(len(raw), dtype=np.float64) - (WORDS_FROM - 1), 1.0)  # pieces before "the": rank 1
    table *= (np.log1p(rank) ** RANK_POWER)[:, None]
    return table.astype(np.float16)


def table_path(cache_dir: Path, digest: str) -> Path:
    return cache_dir / f"{STATIC_NAME}-r{RECIPE}-{digest}.npy"


def read_table(path: Path, vocab: int) -> Any | None:
    """The table stored at `path`, or None when there is none or it is not one (wrong shape or type: rebuilt)."""
    import numpy as np

    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        if path.exists():
            log.warning("static text vectors: cannot read %s (%r); building it again", path, exc)
        return None
    if table.shape != (vocab, DIMENSION) or table.dtype != np.float16:
        log.warning("static text vectors: %s holds a %s %s array, not (%d, %d) float16; building it again",
                    path, table.shape, table.dtype, vocab, DIMENSION)
        return None
    return table


def write_table(path: Path, table: Any) -> None:
    """Atomically: a reader sees the old file, no file, or the whole new one."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with tmp.open("wb") as f:
            np.save(f, table, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_PUNCT = frozenset(chr(c) for c in (*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127)))
"""ASCII punctuation as BERT's pre-tokenizer sees it: each such character is a word of its own."""


def _bert_config(tokenizer: Any) -> bool:
    """Is `tokenizer` the uncased BERT WordPiece setup that `WordPieces` reproduces for printable ASCII?"""
    import json

    conf = json.loads(tokenizer.to_str())
    norm, pre, model = conf.get("normalizer") or {}, conf.get("pre_tokenizer") or {}, conf.get("model") or {}
    return (norm.get("type") == "BertNormalizer" and norm.get("lowercase") is True and norm.get("clean_text") is True
            and pre.get("type") == "BertPreTokenizer" and model.get("type") == "WordPiece"
            and model.get("continuing_subword_prefix") == "##" and model.get("unk_token") == "[UNK]")


class WordPieces:
    """MiniLM's WordPiece ids of a text, as its tokenizer gives them, split at whitespace and remembered per chunk:
    the tokenizer splits on whitespace before anything else, so the ids of a text are those of its chunks end to
    end, and a request's words are mostly words seen before (a dict lookup). A chunk not seen before that is
    printable ASCII is split and looked up here as BERT's tokenizer does it (lower case, each punctuation
    character alone, greedy longest word pieces, `##` inside a word, [UNK] past 100 characters) — a case number
    costs microseconds, not a call into the tokenizer; other chunks ask the tokenizer (every chunk, for a
    tokenizer that is not uncased BERT's, such as WordLlama's). Bounded: the memory is emptied when it holds
    `max_chunks`."""

    def __init__(self, tokenizer: Any, *, max_chunks: int = 50_000, max_pieces: int = MAX_PIECES) -> None:
        self.tokenizer = tokenizer
        self.max_chunks = max_chunks
        self.max_pieces = max_pieces
        self._known: dict[str, list[int]] = {}
        self._vocab: dict[str, int] = tokenizer.get_vocab() if _bert_config(tokenizer) else {}
        self._unk = self._vocab.get("[UNK]", 0)

    def ids(self, text: str) -> list[int]:
        out: list[int] = []
        known = self._known
        for chunk in text.split():
            ids = known.get(chunk)
            if ids is None:
                ids = self._chunk(chunk)
                if len(known) >= self.max_chunks:
                    known.clear()
                if len(chunk) <= 100:  # a long chunk is one [UNK] or a one-off: not worth remembering
                    known[chunk] = ids
            out.extend(ids)
            if len(out) >= self.max_pieces:
                return out[: self.max_pieces]
        return out

    def _chunk(self, chunk: str) -> list[int]:
        if not self._vocab or not chunk.isascii() or not chunk.isprintable():
            ids: list[int] = self.tokenizer.encode(chunk, add_special_tokens=False).ids
            return ids
        out: list[int] = []
        word = ""
        for ch in chunk.lower():
            if ch in _PUNCT:
                if word:
                    out.extend(self._word(word))
                    word = ""
                out.extend(self._word(ch))
            else:
                word += ch
        if word:
            out.extend(self._word(word))
        return out

    def _word(self, word: str) -> list[int]:
        """Greedy longest-match-first word pieces of one lower-case ASCII word (BERT's WordPiece)."""
        vocab = self._vocab
        if len(word) > 100:
            return [self._unk]
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return [self._unk]  # no piece fits: the whole word is unknown
            start = end
        return out


class StaticEmbedder(TableEncoder):
    """all-MiniLM-L6-v2 distilled to one vector per word piece (`features.text_model: static`): 384 dimensions,
    tens of µs of CPU a sentence; its table is built on first use and cached in `cache_dir`."""

    model = STATIC_NAME
    dimension = DIMENSION

    def __init__(self, *, cache_dir: Path | None = None, threads: int = 1) -> None:
        super().__init__(threads=threads)
        self.cache_dir = cache_dir or default_cache_dir()
        self.built_s: float | None = None  # seconds of CPU the table took when this process built it

    def table_file(self) -> Path:
        return table_path(self.cache_dir, model_digest(model_files()[0]))

    def ready(self) -> bool:
        """Is the table loaded (embedding is then cheap)?"""
        return self._loaded is not None

    def stored(self) -> bool:
        """Is the table loaded, or stored in the cache dir (so that loading it takes well under a second)?"""
        return self.ready() or self.table_file().exists()

    def _open(self) -> Any:
        import numpy as np
        from tokenizers import Tokenizer

        model, tokenizer_file = model_files()
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        vocab = tokenizer.get_vocab_size()
        path = table_path(self.cache_dir, model_digest(model)).resolve()
        with _tables_lock:
            table = _tables.get(path)
            if table is None:  # float32 in memory (47 MB): summing float16 rows costs numpy twice the time
                table = _tables[path] = self._read_or_build(path, model, vocab).astype(np.float32)
        return WordPieces(tokenizer), table

    def _read_or_build(self, path: Path, model: Path, vocab: int) -> Any:
        import time

        import onnxruntime as ort

        table = read_table(path, vocab)
        if table is None:
            log.info("static text vectors: building %s from %s (%d word pieces)", path, model, vocab)
            c0 = time.process_time()
            session = ort.InferenceSession(str(model), self._session_options(), providers=["CPUExecutionProvider"])
            table = finish_table(distil_rows(session, range(vocab)))
            self.built_s = time.process_time() - c0
            try:
                write_table(path, table)
            except OSError as exc:  # a read-only data dir: this process keeps its table, the next one builds again
                log.warning("static text vectors: cannot store the table at %s: %r", path, exc)
        return table
