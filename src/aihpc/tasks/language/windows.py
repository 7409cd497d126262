"""A token array cut into the fixed-length windows a language model trains and is evaluated on.

A window is a sequence of ``length`` tokens: the model reads its first
``length - 1`` and predicts its last ``length - 1`` (each token from those
before it).  Two layouts, by how the data were made
(:class:`aihpc.tasks.language.data.LanguageData`):

* **documents** (``doc_length`` L: independent documents laid end to end,
  as the synthetic language is): one window per document, the begin-of-
  sequence token ``bos`` followed by the document's L tokens, so every token
  of the document is predicted, the first from ``bos`` alone, exactly the
  tokens whose loss the data's floor averages;
* **a stream** (text, token files): windows of ``length`` tokens every
  ``length - 1`` tokens, each overlapping the next by one token, so every
  token after the first is predicted once.

Windows are read on demand (:meth:`TokenWindows.raw`), so a memory-mapped
array is read a chunk at a time by staging (:mod:`aihpc.train.staging`),
never whole.  The staging interface's labels are zeros: a window's targets
are its own tokens, shifted (:meth:`aihpc.tasks.language.task.LanguageTask.inputs_and_targets`).
"""

from __future__ import annotations

import numpy as np

from aihpc.base.errors import DataError


class TokenWindows:
    """The windows of ``tokens`` (the module docstring): ``length`` tokens each, starting with
    ``bos`` on a document's window (``doc_length`` given) or every ``length - 1`` tokens of a
    stream (``doc_length`` None)."""

    dtype = np.int64
    normalizer = None

    def __init__(
        self, tokens: np.ndarray, length: int, doc_length: int | None, bos: int | None
    ) -> None:
        if doc_length is not None and (bos is None or length != doc_length + 1):
            raise DataError(
                f"a document's window is its {doc_length} tokens after a begin-of-sequence "
                f"token, {doc_length + 1} in all, got length {length} and bos {bos!r}"
            )
        if length < 2:
            raise DataError(f"a window must hold at least 2 tokens, got {length}")
        self.tokens = tokens
        self.length = length
        self.doc_length = doc_length
        self.bos = bos
        self.sample_shape = (length,)
        if doc_length is not None:
            self._count = tokens.shape[0] // doc_length
        else:
            self._count = max(0, (tokens.shape[0] - 1) // (length - 1))
        if self._count == 0:
            raise DataError(
                f"{tokens.shape[0]} tokens hold no window of {length} tokens: give more data or a "
                "shorter context"
            )

    def __len__(self) -> int:
        result: int = self._count
        return result

    def raw(self, positions: np.ndarray) -> np.ndarray:
        """The windows at ``positions`` as an int64 array (n, length)."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.doc_length is not None:
            starts = positions * self.doc_length
            body = self.tokens[starts[:, None] + np.arange(self.doc_length)].astype(np.int64)
            bos = np.full((positions.shape[0], 1), self.bos, dtype=np.int64)
            return np.concatenate([bos, body], axis=1)
        starts = positions * (self.length - 1)
        return self.tokens[starts[:, None] + np.arange(self.length)].astype(np.int64)

    def label(self, positions: np.ndarray) -> np.ndarray:
        """Zeros: a window's targets are its own tokens, shifted by one."""
        return np.zeros(np.asarray(positions).shape[0], dtype=np.int64)

    @property
    def predicted_tokens(self) -> int:
        """Tokens predicted over all windows (``length - 1`` per window)."""
        result: int = self._count * (self.length - 1)
        return result
