"""Language-model data: token streams with their reference losses.

``load_language(name, path=..., seed=..., val_fraction=..., **options)``
returns a :class:`LanguageData`: 1-D token arrays ``train`` and ``val`` and
three losses in nats per validation token to set a model's loss beside:

* ``unigram_loss``: the best context-free model, frequencies counted on
  train with add-one (Laplace) smoothing, ``p(b) = (C(b) + 1) / (N + V)``, so
  a token unseen in train still has a finite loss;
* ``bigram_loss``: one token of context, ``p(b | a) = (C(a, b) + 1) / (C(a) +
  V)``, pairs counted on train; a token with no predecessor (first of the
  stream or of a document) is scored by the unigram model.  A dense V x V
  table: None for vocabularies over BIGRAM_MAX_VOCAB;
* ``floor``: the best any model can do, known for ``hmm`` only.

Counts stream CHUNK tokens at a time: a memory-mapped file larger than
memory is never read whole, nor widened to int64 whole.

Data sets
---------
``hmm`` (the default) -- a hidden Markov model whose hidden state is a pair
(topic k, state s), K x S states.  A document starts with a uniform topic
and a state drawn from the topic's initial distribution; at each further
token the topic moves with probability ``switch_prob`` to a uniformly chosen
other topic, then the state moves by the (new) topic's transition matrix
``A_k[s, s']``, then the token is drawn from ``B_k[s, :]``.  Each topic's
``A_k``, ``B_k`` and initial distribution mix a part shared by all topics
(weight ``1 - topic_strength``) with the topic's own (weight
``topic_strength``); every row is Dirichlet-sampled (concentrations per entry
``transition_concentration``, ``emission_concentration``: small means sparse)
and then mixed with aihpc.tasks.language.hmm.PROB_FLOOR of the uniform distribution, so no token is
impossible.  Sparse transitions with ambiguous tokens make the state worth
tracking over several tokens (the bigram loss lies well above the floor); a
rare topic switch with weak evidence per token makes context pay back for
tens of tokens (the true model cut to the last c tokens loses, at the
defaults and seed 0, 0.06 nats/token more than the floor at c = 4, 0.04
at c = 16, 0.02 at c = 32, 0.008 at c = 64).  Documents of ``doc_length``
tokens are independent, so a model that sees a whole document can reach the
floor: the true model's cross-entropy on the val documents, ``-1/N sum log
p(x_t | x_<t in its document)``, by the scaled forward algorithm in float64.
The parameters, train and val come from three streams of the seed (a given
``val_tokens`` gives the same val whatever the train size).  Options, with
defaults in HMM_DEFAULTS: the sizes above, ``train_tokens`` and
``val_tokens`` (each rounded up to whole documents).

``text`` -- a folder of UTF-8 text files (or one file) as bytes: vocabulary
256, ``bytes_per_token`` 1 (nats/token / ln 2 = bits per byte).  Files are
read recursively in sorted order of their relative paths, skipping names
that start with ``.``; each is followed by a 0x00 byte, which text hardly
ever contains, so a model sees where a file ends.  Validation is the last
``val_fraction`` of the stream (as nanoGPT splits Shakespeare): exact
whatever the number and sizes of the files, and one big file works.  The
folder is read into memory: tokenise a larger corpus for ``tokens``.

``tokens`` -- a flat binary file of token ids (nanoGPT's ``.bin``), memory
mapped: option ``dtype`` "uint16" (default) or "uint32"; ``vocab_size``
(default: the largest id + 1); ``val_path``, a second such file for
validation, else the last ``val_fraction`` of the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.checks import check_fraction, check_options, integer, number
from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.language.hmm import TopicHMM

#: Tokens per chunk when streaming counts and losses (32 MiB as int64).
CHUNK = 1 << 22
#: Largest vocabulary whose bigram table (V x V int64 counts) is built: 32 MiB.
BIGRAM_MAX_VOCAB = 2048
#: Largest HMM matrix (topics x states x max(states, vocab)): 256 MiB of float64.
MAX_HMM_ENTRIES = 1 << 25
#: Most validation tokens ``hmm`` makes unless ``val_tokens`` asks for more: the floor's
#: forward algorithm costs about 7 us a token on 2 cores, and 2**20 tokens pin the floor
#: to about 0.0015 nats (one standard error over documents).
MAX_DEFAULT_VAL_TOKENS = 1 << 20
#: Separator byte after each file of the ``text`` data set.
FILE_SEPARATOR = b"\x00"

#: Options of ``hmm`` and their defaults (``val_tokens`` None: ``val_fraction`` of all tokens,
#: at most MAX_DEFAULT_VAL_TOKENS).
HMM_DEFAULTS: dict[str, Any] = {
    "train_tokens": 1 << 21,
    "val_tokens": None,
    "doc_length": 256,
    "vocab_size": 256,
    "topics": 32,
    "states": 32,
    "switch_prob": 0.002,
    "topic_strength": 0.02,
    "transition_concentration": 0.01,
    "emission_concentration": 0.008,
}


@dataclass(frozen=True, eq=False)
class LanguageData:
    """A language-model data set: train and val token streams and reference losses.

    ``train``/``val`` are 1-D integer arrays of ids in ``[0, vocab_size)``
    (``numpy.memmap`` for file-backed data).  ``doc_length``: documents of
    that many tokens, independent of each other, laid end to end (None: one
    running stream).  Losses are nats per validation token (see the module
    docstring); ``bytes_per_token`` converts them to bits per byte
    (``loss / ln 2 / bytes_per_token``) where tokens are bytes of text.
    ``generator``: the synthetic generator's parameters, None for real data.
    """

    name: str
    vocab_size: int
    train: np.ndarray = field(repr=False)
    val: np.ndarray = field(repr=False)
    unigram_loss: float
    bigram_loss: float | None = None
    doc_length: int | None = None
    floor: float | None = None
    bytes_per_token: float | None = None
    generator: dict[str, Any] | None = None
    source: str = ""  # where the tokens came from: a path, or "synthetic"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {self.name!r}")
        integer("vocab_size", self.vocab_size, 2, terse=True, numpy=True)
        length = (
            1
            if self.doc_length is None
            else integer("doc_length", self.doc_length, 2, terse=True, numpy=True)
        )
        for split, array in (("train", self.train), ("val", self.val)):
            if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in "iu":
                raise DataError(
                    f"{split} tokens must be a 1-D integer numpy array, got "
                    f"{type(array).__name__} {getattr(array, 'dtype', '')} {np.shape(array)}"
                )
            if array.shape[0] < 2 or array.shape[0] % length:
                raise DataError(
                    f"{split} tokens must be >= 2 and a multiple of doc_length "
                    f"{self.doc_length}, got {array.shape[0]}"
                )
        for name in ("floor", "unigram_loss", "bigram_loss", "bytes_per_token"):
            value = getattr(self, name)
            if value is None and name != "unigram_loss":
                continue
            if not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise DataError(f"{name} must be a finite number >= 0 or None, got {value!r}")

    def info(self) -> dict[str, Any]:
        """Everything but the arrays, JSON-serialisable: what results.json records."""
        out = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("train", "val")
        }
        return out | {
            "dtype": str(self.train.dtype),
            "file_backed": isinstance(self.train, np.memmap),
            "train_tokens": int(self.train.shape[0]),
            "val_tokens": int(self.val.shape[0]),
        }


# ---------------------------------------------------------------------------- streamed counts


def _chunks(
    tokens: np.ndarray, doc_length: int | None, chunk: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(current, previous)`` int64 arrays chunk by chunk; previous is -1 where a token has
    none (the stream's first, or a document's first)."""
    n = tokens.shape[0]
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        low = max(start - 1, 0)
        seg = np.asarray(tokens[low:stop]).astype(np.int64)
        if start == 0:
            current, previous = seg, np.concatenate([np.array([-1]), seg[:-1]])
        else:
            current, previous = seg[1:], seg[:-1].copy()
        if doc_length is not None:
            first = (np.arange(start, stop) % doc_length) == 0
            previous[first] = -1
        yield current, previous


def max_token(tokens: np.ndarray, chunk: int = CHUNK) -> int:
    """The largest id in ``tokens``, read ``chunk`` tokens at a time."""
    return max(int(np.asarray(tokens[i : i + chunk]).max()) for i in range(0, len(tokens), chunk))


def token_counts(tokens: np.ndarray, vocab_size: int, chunk: int = CHUNK) -> np.ndarray:
    """How often each id occurs (int64, length ``vocab_size``), streamed."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for i in range(0, len(tokens), chunk):
        part = np.bincount(np.asarray(tokens[i : i + chunk]).astype(np.int64), minlength=vocab_size)
        if part.shape[0] > vocab_size:
            raise DataError(f"token id {part.shape[0] - 1} >= vocab_size {vocab_size}")
        counts += part
    return counts


def _unigram_log_probs(train: np.ndarray, vocab_size: int, chunk: int) -> np.ndarray:
    counts = token_counts(train, vocab_size, chunk)
    return np.log(counts + 1.0) - math.log(counts.sum() + vocab_size)


def unigram_loss(
    train: np.ndarray, val: np.ndarray, vocab_size: int, *, chunk: int = CHUNK
) -> float:
    """Nats per ``val`` token of the Laplace-smoothed unigram model counted on ``train``."""
    log_p = _unigram_log_probs(train, vocab_size, chunk)
    total = 0.0
    for i in range(0, len(val), chunk):
        ids = np.asarray(val[i : i + chunk]).astype(np.int64)
        if int(ids.max()) >= vocab_size:
            raise DataError(f"token id {int(ids.max())} >= vocab_size {vocab_size}")
        total -= float(log_p[ids].sum())
    return total / len(val)


def bigram_loss(
    train: np.ndarray,
    val: np.ndarray,
    vocab_size: int,
    *,
    doc_length: int | None = None,
    chunk: int = CHUNK,
) -> float | None:
    """Nats per ``val`` token of the Laplace-smoothed bigram model counted on ``train``.

    Pairs never cross a document boundary; a token without predecessor is
    scored by the unigram model.  None above BIGRAM_MAX_VOCAB.
    """
    v = vocab_size
    if v > BIGRAM_MAX_VOCAB:
        return None
    pairs = np.zeros((v, v), dtype=np.int64)
    for current, previous in _chunks(train, doc_length, chunk):
        has = previous >= 0
        pairs += np.bincount(previous[has] * v + current[has], minlength=v * v).reshape(v, v)
    log_row = np.log(pairs.sum(axis=1) + float(v))
    log_uni = _unigram_log_probs(train, v, chunk)
    total = 0.0
    for current, previous in _chunks(val, doc_length, chunk):
        has = previous >= 0
        total -= float(log_uni[current[~has]].sum())
        a, b = previous[has], current[has]
        total -= float((np.log(pairs[a, b] + 1.0) - log_row[a]).sum())
    return total / len(val)


def _hmm_options(options: dict[str, Any], val_fraction: float) -> dict[str, Any]:
    check_options("hmm", options, HMM_DEFAULTS)
    o = {**HMM_DEFAULTS, **options}
    for name, minimum in (("doc_length", 2), ("vocab_size", 2), ("topics", 1), ("states", 1)):
        o[name] = integer(name, o[name], minimum, terse=True, numpy=True)
    o["train_tokens"] = integer(
        "train_tokens", o["train_tokens"], o["doc_length"], terse=True, numpy=True
    )
    if o["val_tokens"] is None:
        share = round(o["train_tokens"] * val_fraction / (1 - val_fraction))
        o["val_tokens"] = min(max(1, share), MAX_DEFAULT_VAL_TOKENS)
    o["val_tokens"] = integer("val_tokens", o["val_tokens"], 1, terse=True, numpy=True)
    if o["vocab_size"] > 1 << 16:
        raise ConfigError(f"vocab_size must be <= 65536 for 'hmm', got {o['vocab_size']}")
    entries = o["topics"] * o["states"] * max(o["states"], o["vocab_size"])
    if entries > MAX_HMM_ENTRIES:
        raise ConfigError(
            f"topics x states x max(states, vocab_size) must be <= {MAX_HMM_ENTRIES}, got {entries}"
        )
    o["switch_prob"] = number("switch_prob", o["switch_prob"], 0.0, 1.0, finite=False, terse=True)
    o["topic_strength"] = number(
        "topic_strength", o["topic_strength"], 0.0, 1.0, finite=False, terse=True
    )
    for name in ("transition_concentration", "emission_concentration"):
        o[name] = number(name, o[name], 1e-4, 1e4, finite=False, terse=True)
    return o


def _load_hmm(
    path: str | os.PathLike[str] | None, *, seed: int, val_fraction: float, **options: Any
) -> LanguageData:
    if path is not None:
        raise ConfigError(f"data set 'hmm' takes no path, got {path!r}")
    o = _hmm_options(options, val_fraction)
    length = o["doc_length"]
    train_docs, val_docs = -(-o["train_tokens"] // length), -(-o["val_tokens"] // length)
    params = {
        n: o[n] for n in HMM_DEFAULTS if n not in ("train_tokens", "val_tokens", "doc_length")
    }
    hmm = TopicHMM.random(np.random.default_rng([seed, 0x484D4D, 0]), **params)
    train = hmm.sample(train_docs, length, np.random.default_rng([seed, 0x484D4D, 1]))
    val = hmm.sample(val_docs, length, np.random.default_rng([seed, 0x484D4D, 2]))
    floor = -float(hmm.log_probs(val).mean())
    train, val = train.ravel(), val.ravel()  # uint16: vocab_size <= 2**16
    generator = {
        "model": "topic x state hidden Markov model (aihpc.tasks.language.data)",
        "seed": seed,
        **params,
        "doc_length": length,
        "train_docs": train_docs,
        "val_docs": val_docs,
    }
    known = {"doc_length": length, "floor": floor, "generator": generator, "source": "synthetic"}
    return _finish("hmm", o["vocab_size"], train, val, **known)


def _split(stream: np.ndarray, val_fraction: float, what: str) -> tuple[np.ndarray, np.ndarray]:
    n = stream.shape[0]
    n_val = int(round(n * val_fraction))
    if n_val < 2 or n - n_val < 2:
        raise DataError(
            f"val_fraction={val_fraction} of {n} tokens leaves {n - n_val} train and "
            f"{n_val} val tokens in {what}; each split needs >= 2"
        )
    return stream[: n - n_val], stream[n - n_val :]


def _text_files(root: Path) -> list[Path]:
    if not root.exists():
        raise DataError(f"text folder not found: {root}")
    if root.is_file():
        return [root]
    files = [
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]
    if not files:
        raise DataError(f"no text files in {root}")
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _load_text(
    path: str | os.PathLike[str] | None, *, seed: int, val_fraction: float, **options: Any
) -> LanguageData:
    check_options("text", options, ())
    if path is None:
        raise ConfigError("data set 'text' needs path=<a folder of UTF-8 text files>")
    root = Path(path)
    parts: list[bytes] = []
    for file in _text_files(root):
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise DataError(f"cannot read {file}: {exc.strerror or exc}") from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{file} is not valid UTF-8 (byte {exc.start}: {exc.reason})") from None
        parts.extend((raw, FILE_SEPARATOR))
    stream = np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.uint16)
    if stream.shape[0] == len(parts) // 2:
        raise DataError(f"the text files in {root} are all empty")
    train, val = _split(stream, val_fraction, str(root))
    return _finish("text", 256, train, val, bytes_per_token=1.0, source=str(root))


def _token_file(path: object, dtype: np.dtype) -> np.memmap:
    file = Path(str(path))
    if not file.is_file():
        raise DataError(f"token file not found: {file}")
    size = file.stat().st_size
    if size == 0 or size % dtype.itemsize:
        raise DataError(
            f"{file} has {size} bytes, not a positive multiple of {dtype.itemsize} ({dtype} ids)"
        )
    return np.memmap(file, dtype=dtype, mode="r")


def _load_tokens(
    path: str | os.PathLike[str] | None, *, seed: int, val_fraction: float, **options: Any
) -> LanguageData:
    check_options("tokens", options, ("dtype", "vocab_size", "val_path"))
    if path is None:
        raise ConfigError("data set 'tokens' needs path=<a flat file of token ids>")
    name = options.get("dtype", "uint16")
    if name not in ("uint16", "uint32"):
        raise ConfigError(f"dtype must be 'uint16' or 'uint32', got {name!r}")
    stream = _token_file(path, np.dtype(name))
    train: np.ndarray
    val: np.ndarray
    if options.get("val_path") is not None:
        train, val = stream, _token_file(options["val_path"], np.dtype(name))
    else:
        train, val = _split(stream, val_fraction, str(path))
    largest = max(max_token(train), max_token(val))
    vocab = options.get("vocab_size")
    if vocab is None:
        vocab = max(largest + 1, 2)
    elif integer("vocab_size", vocab, 2, terse=True, numpy=True) <= largest:
        raise DataError(f"token id {largest} in {path} is >= vocab_size {vocab}")
    return _finish("tokens", int(vocab), train, val, source=str(path))


def _finish(
    name: str, vocab: int, train: np.ndarray, val: np.ndarray, **fields: Any
) -> LanguageData:
    """The record, with the unigram and bigram losses counted on these splits."""
    uni = unigram_loss(train, val, vocab)
    bi = bigram_loss(train, val, vocab, doc_length=fields.get("doc_length"))
    return LanguageData(name, vocab, train, val, unigram_loss=uni, bigram_loss=bi, **fields)


#: name -> (loader ``(path, *, seed, val_fraction, **options)``, one-line description).
LANGUAGES: dict[str, tuple[Callable[..., LanguageData], str]] = {
    "hmm": (_load_hmm, "synthetic topic x state HMM language with a known loss floor (default)"),
    "text": (_load_text, "a folder of UTF-8 text files as bytes (vocabulary 256)"),
    "tokens": (_load_tokens, "a flat uint16/uint32 file of token ids, memory-mapped"),
}


def language_names() -> list[str]:
    """Names of the language data sets, sorted."""
    return sorted(LANGUAGES)


def load_language(
    name: str = "hmm",
    *,
    path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    val_fraction: float = 0.1,
    **options: Any,
) -> LanguageData:
    """Load language data set ``name``; see the module docstring for each.

    ``val_fraction``: the validation share (``hmm``: of all tokens unless
    ``val_tokens`` is given; ``tokens``: ignored with ``val_path``).  Raises
    ConfigError for an unknown name or a bad option, DataError for missing,
    empty or corrupt data.
    """
    if name not in LANGUAGES:
        raise ConfigError(
            f"unknown language data set {name!r}; valid: {', '.join(language_names())}"
        )
    integer("seed", seed, 0)
    fraction = check_fraction(val_fraction)
    return LANGUAGES[name][0](path, seed=seed, val_fraction=fraction, **options)
