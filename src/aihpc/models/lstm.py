"""An LSTM language model: PyTorch's ``word_language_model`` example, "small".

Token ids ``(N, T)`` (int64, each in ``[0, vocab)``) -> embedding ``E`` ->
dropout -> a ``layers``-deep ``nn.LSTM`` of ``hidden`` units -> dropout ->
linear decoder -> next-token logits for every position, flattened to 2-D
``(N * T, vocab)`` (row ``n * T + t`` predicts token ``t + 1`` of sequence
``n``), so a training target is ``randint(vocab, (N * T,))`` as for every zoo
model.  The hidden and cell states start at zero on every call (no state is
carried between batches), so the model is a pure function of its input.

Defaults are the example's ``--emsize 200 --nhid 200 --nlayers 2
--dropout 0.2`` on a 10,000-word vocabulary (Penn Treebank's), untied
weights, sequences of 35 tokens (``--bptt 35``).  Parameters, with PyTorch's
two LSTM bias vectors (``b_ih`` and ``b_hh``, ``4 H`` each)::

    embedding   V E                        = 10000 x 200         2,000,000
    LSTM layer  4 (H (in + H) + 2 H)       = 4 (200 x 400 + 400)   321,600  (x 2)
    decoder     H V + V                    = 200 x 10000 + 10000 2,010,000
    total                                                         4,653,200
"""

from __future__ import annotations

import torch
from torch import nn

from aihpc.base.errors import ModelError

VOCAB = 10_000
SEQ_LEN = 35


class LSTMLanguageModel(nn.Module):
    """Embedding, multi-layer LSTM (``batch_first``), linear decoder over the vocabulary.

    ``tie_weights`` shares the embedding matrix with the decoder (Press &
    Wolf 2017); it needs ``hidden == embedding``.  Initialisation follows the
    example: embedding and decoder weights uniform in [-0.1, 0.1], decoder
    bias zero, the LSTM PyTorch's default (uniform in +-1/sqrt(hidden)).
    """

    def __init__(
        self,
        vocab: int = VOCAB,
        embedding: int = 200,
        hidden: int = 200,
        layers: int = 2,
        dropout: float = 0.2,
        tie_weights: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, embedding)
        self.drop = nn.Dropout(dropout)
        self.rnn = nn.LSTM(
            embedding, hidden, layers, dropout=dropout if layers > 1 else 0.0, batch_first=True
        )
        self.decoder = nn.Linear(hidden, vocab)
        if tie_weights:
            if hidden != embedding:
                raise ModelError(
                    f"tied weights need hidden == embedding, got {hidden} and {embedding}"
                )
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if not tie_weights:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(N, T)`` int64 token ids -> ``(N * T, vocab)`` logits."""
        x = self.drop(self.encoder(tokens))
        y, _ = self.rnn(x)
        logits = self.decoder(self.drop(y))
        out: torch.Tensor = logits.reshape(-1, logits.shape[-1])
        return out


def lstm_lm(num_classes: int = VOCAB) -> LSTMLanguageModel:
    """The "small" word-level LSTM LM; ``num_classes`` is the vocabulary size
    (4,653,200 parameters at 10,000 words)."""
    return LSTMLanguageModel(vocab=num_classes)
