"""Operations per sample of a trial's network, counted once per architecture and kept by the worker.

The count is a pure function of the architecture, the batch size and the
dropout, so a worker counts each once and keeps it for the epochs that
follow.  It runs on a model built on the meta device: no weights are
allocated or initialised, and the trial's own model is built once, where it
trains (:func:`aihpc.train.trainer.build`).  The data a trial trains on is
staged by :mod:`aihpc.train.staging`.
"""

from __future__ import annotations

import torch

from aihpc.nas.build import SpecNet

_OPS_CACHE: dict[tuple[str, int, float], tuple[float, float]] = {}


def count_ops_per_sample(spec, batch: int, dropout: float) -> tuple[float, float]:
    """Operations per sample: (training step, evaluation forward), cached per architecture.

    Counted at the trial's batch size; the training step includes the loss
    and the backward pass, the evaluation pass is the model in eval mode.
    """
    key = (spec.content_hash(), batch, dropout)
    if key not in _OPS_CACHE:
        from aihpc.counting import count_ops

        meta = torch.device("meta")
        with meta:
            model = SpecNet(spec)
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = dropout
        x = torch.zeros((batch, *spec.input_shape), device=meta)
        y = torch.zeros(batch, dtype=torch.long, device=meta)
        train = count_ops(model, (x,), train=True, target=y).total / batch
        infer = count_ops(model, (x,), train=False).total / batch
        _OPS_CACHE[key] = (train, infer)
    return _OPS_CACHE[key]
