"""The synthetic language's generative model: a hidden Markov model over (topic, state) pairs.

The hidden state is a pair (topic k, state s).  A document starts with a
uniform topic and a state drawn from the topic's initial distribution; at
each further token the topic moves with probability ``switch_prob`` to a
uniformly chosen other topic, then the state moves by the (new) topic's
transition matrix, then the token is drawn from the (topic, state)'s
emissions.  :meth:`TopicHMM.log_probs` is the exact per-token log-probability
of every token given the tokens before it in its document (the scaled
forward algorithm, float64): the floor of :mod:`aihpc.tasks.language.data`'s
synthetic data set.  Why these parameters, and what they give, is said
there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aihpc.base.errors import ConfigError

#: Share of the uniform distribution mixed into every HMM row: no probability is 0.
PROB_FLOOR = 1e-6
#: Documents per batch of the forward algorithm (bounds its memory, not its result).
FORWARD_BATCH = 4096


def _with_floor(p: np.ndarray) -> np.ndarray:
    result: np.ndarray = (1.0 - PROB_FLOOR) * p + PROB_FLOOR / p.shape[-1]
    return result


def _cumulative_rows(p: np.ndarray) -> np.ndarray:
    """Rows' cumulative sums, row r offset by r, flattened: one sorted array in which
    ``searchsorted(c, r + u)`` draws from row r (inverse CDF, all rows at once)."""
    rows = p.reshape(-1, p.shape[-1])
    c = np.cumsum(rows, axis=1)
    c /= c[:, -1:]
    c[:, -1] = 1.0
    return (c + np.arange(rows.shape[0])[:, None]).ravel()


def _draw(cumulative: np.ndarray, rows: np.ndarray, u: np.ndarray, width: int) -> np.ndarray:
    picked = np.searchsorted(cumulative, rows + u, side="right") - rows * width
    result: np.ndarray = np.minimum(picked, width - 1)
    return result


@dataclass(frozen=True, eq=False)
class TopicHMM:
    """A hidden Markov model over (topic, state) pairs; see the module docstring.

    ``initial[k, s]``: p(state s | topic k) at a document's start (topics
    uniform); ``transitions[k, s, s']``: p(s' | s) under (new) topic k;
    ``emissions[k, s, v]``: p(token v | topic k, state s); ``switch_prob``:
    p(the topic changes) per token, to any other topic equally.
    """

    initial: np.ndarray
    transitions: np.ndarray
    emissions: np.ndarray
    switch_prob: float

    def __post_init__(self) -> None:
        k, s, v = self.emissions.shape
        shapes = {"initial": (k, s), "transitions": (k, s, s), "emissions": (k, s, v)}
        for name, shape in shapes.items():
            array = np.array(getattr(self, name), dtype=np.float64)
            if array.shape != shape:
                raise ConfigError(f"{name} must have shape {shape}, got {array.shape}")
            if array.min() < 0 or np.abs(array.sum(axis=-1) - 1.0).max() > 1e-9:
                raise ConfigError(f"{name} rows must be probabilities summing to 1")
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        if not 0.0 <= self.switch_prob <= 1.0:
            raise ConfigError(f"switch_prob must be in [0, 1], got {self.switch_prob!r}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(topics, states, vocabulary size)."""
        k, s, v = self.emissions.shape
        return int(k), int(s), int(v)

    def sample(self, num_docs: int, doc_length: int, rng: np.random.Generator) -> np.ndarray:
        """``num_docs`` independent documents: token ids ``(num_docs, doc_length)``, uint16
        where the vocabulary allows (memory: the output and a few arrays of ``num_docs``)."""
        k_count, s_count, v = self.shape
        initial = _cumulative_rows((self.initial / k_count).reshape(1, -1))
        moves, emit = _cumulative_rows(self.transitions), _cumulative_rows(self.emissions)
        out = np.empty((num_docs, doc_length), dtype=np.uint16 if v <= 1 << 16 else np.int64)
        n = num_docs
        topic, s = np.divmod(
            _draw(initial, np.zeros(n, np.int64), rng.random(n), k_count * s_count), s_count
        )
        for t in range(doc_length):
            if t > 0:
                if k_count > 1:
                    switch = rng.random(n) < self.switch_prob
                    other = (topic + 1 + rng.integers(0, k_count - 1, n)) % k_count
                    topic = np.where(switch, other, topic)
                s = _draw(moves, topic * s_count + s, rng.random(n), s_count)
            out[:, t] = _draw(emit, topic * s_count + s, rng.random(n), v)
        return out

    def log_probs(self, docs: np.ndarray) -> np.ndarray:
        """``log p(x_t | x_<t of its document)`` for every token of ``docs`` (D, L): float64
        (D, L), by the scaled forward algorithm (beliefs renormalised at every token)."""
        docs = np.asarray(docs)
        out = np.empty(docs.shape, dtype=np.float64)
        for i in range(0, docs.shape[0], FORWARD_BATCH):
            out[i : i + FORWARD_BATCH] = self._forward(docs[i : i + FORWARD_BATCH])
        return out

    def _forward(self, docs: np.ndarray) -> np.ndarray:
        # The topic step maps beliefs m[k] -> a * m[k] + b * sum_j m[j] (one topic: no switch).
        k = self.shape[0]
        b = self.switch_prob / (k - 1) if k > 1 else 0.0
        a = 1.0 - self.switch_prob - b if k > 1 else 1.0
        by_token = np.ascontiguousarray(self.emissions.transpose(2, 0, 1))  # (V, K, S)
        out = np.empty(docs.shape, dtype=np.float64)
        belief = self.initial[:, None, :] / self.shape[0]  # (K, D, S) after the first token
        for t in range(docs.shape[1]):
            if t > 0:
                mixed = a * belief + b * belief.sum(axis=0, keepdims=True)
                belief = np.matmul(mixed, self.transitions)
            belief = belief * by_token[docs[:, t]].transpose(1, 0, 2)
            norm = belief.sum(axis=(0, 2))
            belief /= norm[None, :, None]
            out[:, t] = np.log(norm)
        return out

    @classmethod
    def random(
        cls,
        rng: np.random.Generator,
        *,
        vocab_size: int,
        topics: int,
        states: int,
        switch_prob: float,
        topic_strength: float,
        transition_concentration: float,
        emission_concentration: float,
    ) -> TopicHMM:
        """Dirichlet-sampled parameters; see the module docstring."""

        def mixed_rows(size: int, alpha: float, rows: tuple[int, ...]) -> np.ndarray:
            shared = rng.dirichlet(np.full(size, alpha), size=rows)
            own = rng.dirichlet(np.full(size, alpha), size=(topics, *rows))
            return _with_floor((1.0 - topic_strength) * shared + topic_strength * own)

        initial = mixed_rows(states, transition_concentration, ())
        transitions = mixed_rows(states, transition_concentration, (states,))
        emissions = mixed_rows(vocab_size, emission_concentration, (states,))
        return cls(initial, transitions, emissions, float(switch_prob))


# ---------------------------------------------------------------------------- the loaders
