"""``aihpc count``: the operations of one zoo model or architecture spec, counted on meta tensors.

It sits above ``counting`` (the counter), ``models`` (the zoo) and ``tasks``
(each task's architectures): this is where a model by name or by spec is built
and handed to the counter.  A model that reads token ids (a tokens model of the
zoo, ``lstm_lm``, ``transformer_small``; a spec whose task says its input is
token ids) is counted on int64 ids ``(batch, T)``; any other on one float32
input ``(batch, *shape)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError
from aihpc.counting import OpCount, count_ops, format_count


@dataclass(frozen=True)
class ModelCount:
    """What ``aihpc count`` found: the model, its input, its parameters and its operations."""

    label: str  # the zoo name or the spec's path
    model: str | None
    spec: str | None
    shape: tuple[int, ...]  # one sample's
    batch: int
    train: bool
    parameters: int
    count: OpCount

    def to_dict(self) -> dict[str, Any]:
        """``aihpc count --json``: :meth:`OpCount.to_dict` with what was counted."""
        import torch

        return {
            "model": self.model,
            "spec": self.spec,
            "input_shape": list(self.shape),
            "parameters": self.parameters,
            "torch_version": torch.__version__,
            **self.count.to_dict(),
        }

    def render(self, by: str = "operator", depth: int | None = 1) -> str:
        """The table, one row per operator type (or module up to ``depth``), and the totals."""
        mode = "training step" if self.train else "inference"
        title = f"{self.label}: input {self.batch}x{'x'.join(map(str, self.shape))}, {mode}"
        return format_count(self.count, by=by, depth=depth, title=title, parameters=self.parameters)


def count_model(
    *,
    model: str | None = None,
    spec: Path | None = None,
    shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
    batch: int = 1,
    train: bool = False,
) -> ModelCount:
    """Count the zoo ``model`` or the architecture ``spec`` for one ``batch`` (``train``: a
    training step; else inference).  ``shape``: one sample's, default the model's or spec's."""
    if batch < 1:
        raise ConfigError(f"batch must be >= 1, got {batch}")
    net, shape, label, tokens = _build(model, spec, shape, num_classes)
    example: Any = (batch, *shape)  # a shape: one float32 input
    if tokens and spec is not None:  # a language model's spec: token ids (batch, context)
        import torch

        example = torch.zeros((batch, *shape), dtype=torch.long, device="meta")
    elif model is not None:
        from aihpc import models

        if models.info(model).input_kind == "tokens":
            example = models.example_input(
                model, batch, shape, device="meta", num_classes=num_classes
            )
    return ModelCount(
        label=label,
        model=model,
        spec=None if spec is None else str(spec),
        shape=shape,
        batch=batch,
        train=train,
        parameters=sum(p.numel() for p in net.parameters()),
        count=count_ops(net, example, train=train),
    )


def _build(
    model: str | None, spec: Path | None, shape: tuple[int, ...] | None, num_classes: int | None
) -> tuple[Any, tuple[int, ...], str, bool]:
    """The model (on the meta device when it can be built there), one sample's input shape, a
    label, and whether it reads tokens.  A tokens model gets no ``in_channels``."""
    import torch

    if spec is not None:
        from aihpc.arch.spec_file import load_spec

        if num_classes is not None:
            raise ConfigError("--num-classes applies to --model only (a spec fixes its classes)")
        task, arch = load_spec(spec)
        own, vocab = task.model_input(arch)
        shape = shape or own
        factory: Any = functools.partial(task.model, arch)
        label, tokens = str(spec), vocab is not None
    elif model is not None:
        from aihpc import models

        name, info = model, models.info(model)
        sample = shape = shape or tuple(info.input_shape)
        tokens = info.input_kind == "tokens"

        def factory() -> Any:
            if info.input_kind == "tokens":
                return models.create(name, num_classes=num_classes)
            return models.create(name, num_classes=num_classes, in_channels=sample[0])

        label = model
    else:
        raise ConfigError("give a zoo model or an architecture spec to count, got neither")
    try:
        with torch.device("meta"):
            net = factory()
    except (RuntimeError, NotImplementedError):  # a builder that needs real tensors
        net = factory()
    return net, shape, label, tokens
