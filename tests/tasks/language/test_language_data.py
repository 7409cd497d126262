"""Language-model data: the topic HMM and its floor, byte-level text, memory-mapped token files."""

from __future__ import annotations

import itertools
import json
import math
import pydoc_data
import shutil
import string
import textwrap
from pathlib import Path

import numpy as np
import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.language.data import (
    HMM_DEFAULTS,
    MAX_DEFAULT_VAL_TOKENS,
    LanguageData,
    _hmm_options,
    bigram_loss,
    load_language,
    unigram_loss,
)
from aihpc.tasks.language.hmm import TopicHMM

SMALL = dict(train_tokens=8192, val_tokens=2048, doc_length=64, topics=4, states=8, vocab_size=64)


def tiny_hmm(topics: int, states: int, vocab: int, seed: int, switch: float = 0.3) -> TopicHMM:
    rng = np.random.default_rng(seed)
    return TopicHMM(
        initial=rng.dirichlet(np.ones(states), size=topics),
        transitions=rng.dirichlet(np.ones(states), size=(topics, states)),
        emissions=rng.dirichlet(np.ones(vocab), size=(topics, states)),
        switch_prob=switch,
    )


def brute_log_likelihood(hmm: TopicHMM, doc: tuple[int, ...]) -> float:
    """log p(doc) summed over every hidden path of (topic, state) pairs."""
    k_count, s_count, _ = hmm.shape
    rho = hmm.switch_prob if k_count > 1 else 0.0  # one topic: nowhere to switch to
    hidden = list(itertools.product(range(k_count), range(s_count)))
    total = 0.0
    for path in itertools.product(hidden, repeat=len(doc)):
        k, s = path[0]
        p = hmm.initial[k, s] / k_count * hmm.emissions[k, s, doc[0]]
        for (k, s), (k2, s2), x in zip(path[:-1], path[1:], doc[1:], strict=True):
            topic = (1 - rho) if k2 == k else rho / (k_count - 1)
            p *= topic * hmm.transitions[k2, s, s2] * hmm.emissions[k2, s2, x]
        total += p
    return math.log(total)


@pytest.mark.parametrize(("topics", "states", "length"), [(1, 3, 5), (2, 2, 5), (3, 2, 4)])
def test_forward_algorithm_equals_sum_over_all_hidden_paths(topics, states, length):
    hmm = tiny_hmm(topics, states, 3, seed=topics * 10 + states)
    docs = np.random.default_rng(1).integers(0, 3, size=(3, length))
    cumulative = np.cumsum(hmm.log_probs(docs), axis=1)  # log p(x_1..x_t)
    for doc, prefix_logs in zip(docs, cumulative, strict=True):
        for t in range(1, length + 1):
            exact = brute_log_likelihood(hmm, tuple(doc[:t]))
            assert prefix_logs[t - 1] == pytest.approx(exact, rel=1e-12)


def test_sampler_draws_from_the_model_the_forward_algorithm_scores():
    hmm = tiny_hmm(2, 2, 3, seed=5, switch=0.2)
    n = 60_000
    docs = hmm.sample(n, 3, np.random.default_rng(0))
    outcomes = np.array(list(itertools.product(range(3), repeat=3)))
    exact = np.exp(hmm.log_probs(outcomes).sum(axis=1))
    assert exact.sum() == pytest.approx(1.0, rel=1e-12)
    codes = docs[:, 0] * 9 + docs[:, 1] * 3 + docs[:, 2]
    observed = np.bincount(codes, minlength=27) / n
    sigma = np.sqrt(exact * (1 - exact) / n)
    assert np.all(np.abs(observed - exact) <= 5 * sigma + 1e-4)


@pytest.fixture(scope="module")
def default_hmm() -> LanguageData:
    return load_language("hmm")


def test_default_language_floor_below_bigram_below_unigram(default_hmm):
    d = default_hmm
    assert d.name == "hmm" and d.vocab_size == 256 and d.doc_length == 256
    assert d.train.dtype == np.uint16 and d.train.shape == (HMM_DEFAULTS["train_tokens"],)
    assert d.val.shape[0] % 256 == 0 and d.val.shape[0] >= round((1 << 21) / 9)
    assert d.floor is not None and d.bigram_loss is not None
    assert 0.5 < d.floor < d.bigram_loss - 0.2
    assert d.bigram_loss < d.unigram_loss - 0.5
    assert d.unigram_loss < math.log(256)
    info = d.info()
    assert json.loads(json.dumps(info)) == info
    assert info["floor"] == d.floor and info["generator"]["topics"] == HMM_DEFAULTS["topics"]
    assert info["train_tokens"] == 1 << 21 and not info["file_backed"]


def test_hmm_is_deterministic_in_the_seed():
    a, b = load_language("hmm", seed=3, **SMALL), load_language("hmm", seed=3, **SMALL)
    np.testing.assert_array_equal(a.train, b.train)
    np.testing.assert_array_equal(a.val, b.val)
    assert a.floor == b.floor and a.info() == b.info()
    c = load_language("hmm", seed=4, **SMALL)
    assert not np.array_equal(a.train, c.train) and a.floor != c.floor
    # val is its own stream: it does not move when the train size does
    longer = load_language("hmm", seed=3, **{**SMALL, "train_tokens": 16384})
    np.testing.assert_array_equal(a.val, longer.val)
    assert longer.floor == a.floor


def test_hmm_sizes_round_up_to_whole_documents():
    d = load_language("hmm", val_fraction=0.2, **{**SMALL, "val_tokens": None})
    assert d.train.shape[0] == 8192 and d.val.shape[0] == 2048  # 8192 / 4, in documents of 64
    odd = load_language("hmm", **{**SMALL, "train_tokens": 100, "val_tokens": 65})
    assert odd.train.shape[0] == 128 and odd.val.shape[0] == 128
    # a large train set gets a capped val set by default, the one asked for otherwise
    assert _hmm_options({"train_tokens": 1 << 26}, 0.1)["val_tokens"] == MAX_DEFAULT_VAL_TOKENS
    assert _hmm_options({"train_tokens": 1 << 26, "val_tokens": 1 << 21}, 0.1)["val_tokens"] == (
        1 << 21
    )


@pytest.mark.parametrize(
    ("name", "kwargs", "error", "message"),
    [
        ("hmm", {"bogus": 1}, ConfigError, r"unknown option.*bogus; valid: doc_length, "),
        ("hmm", {"topics": 0}, ConfigError, r"topics must be >= 1, got 0"),
        ("hmm", {"doc_length": "64"}, ConfigError, r"doc_length must be an integer >= 2"),
        ("hmm", {"switch_prob": 1.5}, ConfigError, r"switch_prob must be in \[0, 1\], got 1.5"),
        ("hmm", {"topic_strength": True}, ConfigError, r"topic_strength must be a number"),
        ("hmm", {"emission_concentration": 0}, ConfigError, r"emission_concentration must be in"),
        ("hmm", {"vocab_size": 70000}, ConfigError, r"vocab_size must be <= 65536"),
        ("hmm", {"train_tokens": 100}, ConfigError, r"train_tokens must be >= 256, got 100"),
        ("hmm", {"val_tokens": 0}, ConfigError, r"val_tokens must be >= 1, got 0"),
        ("hmm", {"path": "x"}, ConfigError, r"'hmm' takes no path"),
        ("hmm", {"seed": -1}, ConfigError, r"seed must be an integer >= 0, got -1"),
        ("hmm", {"val_fraction": 1.0}, ConfigError, r"val_fraction must be in \(0, 1\)"),
        ("nope", {}, ConfigError, r"unknown language data set 'nope'; valid: hmm, text, tokens"),
        ("text", {}, ConfigError, r"'text' needs path"),
        ("text", {"path": ".", "dtype": "uint16"}, ConfigError, r"unknown option.*valid: \(none\)"),
        ("tokens", {}, ConfigError, r"'tokens' needs path"),
        ("tokens", {"path": "x", "dtype": "int8"}, ConfigError, r"dtype must be 'uint16' or"),
        ("tokens", {"path": "/no/such.bin"}, DataError, r"token file not found: /no/such.bin"),
        ("text", {"path": "/no/such"}, DataError, r"text folder not found: /no/such"),
    ],
)
def test_bad_options_fail_in_one_line(name, kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        load_language(name, **kwargs)
    assert "\n" not in str(info.value)


def test_record_is_validated():
    ok = dict(name="x", vocab_size=4, doc_length=2, floor=None, unigram_loss=1.0)
    ok |= dict(bigram_loss=None, bytes_per_token=None, generator=None)
    tokens = np.zeros(6, dtype=np.uint16)
    LanguageData(train=tokens, val=tokens, **ok)
    with pytest.raises(
        DataError, match="train tokens must be >= 2 and a multiple of doc_length 2, got 5"
    ):
        LanguageData(train=tokens[:5], val=tokens, **ok)
    with pytest.raises(DataError, match="val tokens must be a 1-D integer numpy array"):
        LanguageData(train=tokens, val=tokens.reshape(2, 3), **ok)
    with pytest.raises(DataError, match="floor must be a finite number >= 0 or None, got nan"):
        LanguageData(train=tokens, val=tokens, **{**ok, "floor": float("nan")})


def stdlib_texts(root: Path) -> list[Path]:
    """Python's own text, copied into ``root``: pydoc's topics and a few modules' sources."""
    topics = Path(pydoc_data.__file__).parent / "topics.py"
    targets = [root / "b" / "topics.py", root / "a" / "textwrap.py", root / "string.py"]
    for source, target in zip(
        (topics, Path(textwrap.__file__), Path(string.__file__)), targets, strict=True
    ):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return sorted(targets, key=lambda p: p.relative_to(root).as_posix())


def test_text_is_bytes_of_sorted_files_with_separators(tmp_path):
    files = stdlib_texts(tmp_path)
    (tmp_path / ".hidden.txt").write_text("left out")
    expected = b"".join(f.read_bytes() + b"\x00" for f in files)
    d = load_language("text", path=tmp_path, val_fraction=0.1)
    assert d.vocab_size == 256 and d.bytes_per_token == 1.0 and d.floor is None
    assert d.doc_length is None and d.generator is None and d.train.dtype == np.uint16
    n_val = round(len(expected) * 0.1)
    assert d.val.shape[0] == n_val and d.train.shape[0] == len(expected) - n_val
    stream = np.concatenate([d.train, d.val]).astype(np.uint8).tobytes()
    assert stream == expected
    assert d.bigram_loss is not None and d.bigram_loss < d.unigram_loss < math.log(256)
    assert d.info()["source"] == str(tmp_path)


def test_text_rejects_bad_utf8_and_empty_folders(tmp_path):
    stdlib_texts(tmp_path)
    bad = tmp_path / "a" / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    with pytest.raises(DataError, match=f"{bad} is not valid UTF-8"):
        load_language("text", path=tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=f"no text files in {empty}"):
        load_language("text", path=empty)
    (empty / "blank.txt").write_text("")
    with pytest.raises(DataError, match="are all empty"):
        load_language("text", path=empty)


def test_tokens_uint16_file_is_memory_mapped(tmp_path):
    ids = np.random.default_rng(0).integers(0, 1000, size=5000).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    d = load_language("tokens", path=tmp_path / "train.bin", val_fraction=0.2)
    assert isinstance(d.train, np.memmap) and isinstance(d.val, np.memmap)
    assert Path(d.train.filename) == Path(d.val.filename) == (tmp_path / "train.bin").resolve()
    assert d.train.dtype == np.uint16 and d.vocab_size == int(ids.max()) + 1
    np.testing.assert_array_equal(d.train, ids[:4000])
    np.testing.assert_array_equal(d.val, ids[4000:])
    assert d.info()["file_backed"] and d.bytes_per_token is None and d.floor is None
    wide = load_language("tokens", path=tmp_path / "train.bin", vocab_size=4096)
    assert wide.vocab_size == 4096 and wide.bigram_loss is None  # over BIGRAM_MAX_VOCAB
    with pytest.raises(DataError, match=r"token id \d+ in .*train.bin is >= vocab_size 10"):
        load_language("tokens", path=tmp_path / "train.bin", vocab_size=10)


def test_tokens_uint32_with_a_val_file(tmp_path):
    rng = np.random.default_rng(1)
    train = rng.integers(0, 70_000, size=3000).astype(np.uint32)
    val = rng.integers(0, 70_000, size=700).astype(np.uint32)
    train.tofile(tmp_path / "train.bin")
    val.tofile(tmp_path / "val.bin")
    d = load_language(
        "tokens", path=tmp_path / "train.bin", dtype="uint32", val_path=tmp_path / "val.bin"
    )
    assert isinstance(d.train, np.memmap) and isinstance(d.val, np.memmap)
    assert d.train.dtype == np.uint32 and d.vocab_size == int(max(train.max(), val.max())) + 1
    np.testing.assert_array_equal(d.train, train)
    np.testing.assert_array_equal(d.val, val)


def test_tokens_file_of_a_bad_size(tmp_path):
    (tmp_path / "odd.bin").write_bytes(b"\x01" * 7)
    with pytest.raises(DataError, match=r"odd.bin has 7 bytes, not a positive multiple of 2"):
        load_language("tokens", path=tmp_path / "odd.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty.bin has 0 bytes"):
        load_language("tokens", path=tmp_path / "empty.bin")


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
def test_streamed_losses_equal_direct_counts(chunk):
    rng = np.random.default_rng(2)
    vocab = 12
    train = rng.integers(0, 10, size=300).astype(np.uint16)  # ids 10, 11 never in train
    val = rng.integers(0, vocab, size=90).astype(np.uint16)
    counts = np.bincount(train, minlength=vocab)
    log_uni = np.log((counts + 1) / (len(train) + vocab))
    direct = -log_uni[val].mean()
    assert unigram_loss(train, val, vocab, chunk=chunk) == pytest.approx(direct, rel=1e-12)
    for doc_length in (None, 30):
        pairs = np.zeros((vocab, vocab))
        for i in range(1, len(train)):
            if doc_length is None or i % doc_length:
                pairs[train[i - 1], train[i]] += 1
        logs = [
            log_uni[val[i]]
            if i == 0 or (doc_length is not None and i % doc_length == 0)
            else np.log((pairs[val[i - 1], val[i]] + 1) / (pairs[val[i - 1]].sum() + vocab))
            for i in range(len(val))
        ]
        streamed = bigram_loss(train, val, vocab, doc_length=doc_length, chunk=chunk)
        assert streamed == pytest.approx(-np.mean(logs), rel=1e-12)
