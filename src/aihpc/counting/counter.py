"""``count_ops``: count every operation of a forward (and backward) pass.

The model is copied to the meta device (parameters and buffers become shape-
only tensors, nothing is allocated or computed), wrapped with its loss in a
small ``_Step`` module, and run under :class:`~torch.utils.flop_counter.
FlopCounterMode` with this package's formulas as ``custom_mapping``, inside a
recorder that sees every aten op actually executed, and under the op memo
(:mod:`aihpc.counting.op_memo`), which replays an op met before with the same
arguments.  Counts are read once at the end of the forward (model + loss) and
once after the backward.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from aihpc.base.errors import ConfigError, ModelError
from aihpc.counting.formula_table import Formula, FormulaFn
from aihpc.counting.op_memo import OpMemo
from aihpc.counting.registry import FORMULAS, KNOWN_ZERO, family, op_name

LOSSES = ("cross_entropy", "mse", "sum")
DEVICES = ("meta", "cpu")
MODEL_KEY, LOSS_KEY = "(model)", "(loss)"


@dataclass(frozen=True)
class OpCount:
    """Operation counts of one step (one forward pass; with ``train``, also
    the loss and the backward pass) for a batch of ``batch_size`` samples.

    ``forward``: model forward plus, when ``train``, the loss forward;
    ``backward``: everything autograd ran; ``total = forward + backward``.
    ``by_operator``: op type -> {"forward": n, "backward": n} (backward ops
    are listed under their forward op, e.g. convolution_backward under
    "convolution"); ``by_module``: module path (as in ``named_modules()``;
    the whole model is ``"(model)"``, the loss ``"(loss)"``) -> the same,
    inclusive of sub-modules; ``uncounted``: op name -> calls of ops that are
    neither counted nor known to be free; ``conv_linear_macs``: forward
    multiply-accumulates of convolutions and matrix products alone (what
    papers publish as "FLOPs").  All counts are operations (1 MAC = 2).
    """

    forward: int
    backward: int
    total: int
    by_operator: dict[str, dict[str, int]] = field(default_factory=dict)
    by_module: dict[str, dict[str, int]] = field(default_factory=dict)
    uncounted: dict[str, int] = field(default_factory=dict)
    batch_size: int = 1
    train: bool = True
    conv_linear_macs: int = 0

    def __post_init__(self) -> None:
        if self.total != self.forward + self.backward:
            raise ValueError(
                f"total {self.total} != forward {self.forward} + backward {self.backward}"
            )

    def per_sample(self) -> dict[str, float]:
        """forward, backward, total and conv_linear_macs divided by the batch size."""
        b = self.batch_size
        return {
            "forward": self.forward / b,
            "backward": self.backward / b,
            "total": self.total / b,
            "conv_linear_macs": self.conv_linear_macs / b,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy of every field (plus ``per_sample``)."""
        return {
            "forward": self.forward,
            "backward": self.backward,
            "total": self.total,
            "conv_linear_macs": self.conv_linear_macs,
            "batch_size": self.batch_size,
            "train": self.train,
            "per_sample": self.per_sample(),
            "by_operator": {k: dict(v) for k, v in self.by_operator.items()},
            "by_module": {k: dict(v) for k, v in self.by_module.items()},
            "uncounted": dict(self.uncounted),
        }


class _OpRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    """Counts the calls of every op that reaches it (i.e. that really runs)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: Counter[Any] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls[getattr(func, "_overloadpacket", func)] += 1
        return func(*args, **(kwargs or {}))


class _MacTally:
    """Wraps formulas so that the MAC part of matrix products is summed too."""

    def __init__(self) -> None:
        self.macs = 0

    def wrap(self, formula: Formula) -> FormulaFn:
        macs_fn = formula.macs
        if macs_fn is None:
            return formula.ops

        def counted(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            self.macs += int(macs_fn(*args, out_shape=out_shape, **kwargs))
            return int(formula.ops(*args, out_shape=out_shape, **kwargs))

        return counted


class _SumLoss(nn.Module):
    """loss = output.sum() (for models with no natural target)."""

    def forward(self, output: torch.Tensor, target: Any = None) -> torch.Tensor:
        return output.sum()


def _loss_module(loss: str) -> nn.Module:
    kind: type[nn.Module] = {
        "cross_entropy": nn.CrossEntropyLoss,
        "mse": nn.MSELoss,
        "sum": _SumLoss,
    }[loss]
    return kind()


class _Step(nn.Module):
    """model, then (if a loss is given) the loss of its main output."""

    def __init__(self, model: nn.Module, loss: str | None, target: torch.Tensor | None) -> None:
        super().__init__()
        self.model = model
        self.loss = _loss_module(loss) if loss is not None else None
        self.loss_kind = loss
        self.target = target

    def forward(self, *inputs: torch.Tensor) -> Any:
        out = self.model(*inputs)
        if self.loss is None:
            return out
        logits = _main_output(out)
        target = self.target
        if target is None and self.loss_kind == "cross_entropy":
            shape = logits.shape[:1] + logits.shape[2:] if logits.dim() > 1 else ()
            target = torch.zeros(shape, dtype=torch.long, device=logits.device)
        elif target is None and self.loss_kind == "mse":
            target = torch.zeros_like(logits)
        return self.loss(logits, target)


def _main_output(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise ModelError(
        "to count training the model must return a tensor (or a tuple/list "
        f"whose first item is one), got {type(out).__name__}"
    )


def _to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    if device == "meta":
        return torch.empty_like(t, device="meta")
    return t.detach().to(device)


def _prepare_inputs(example_inputs: Any, device: str) -> tuple[torch.Tensor, ...]:
    """A tensor, a sequence of tensors, or a shape (ints, batch first; float32)."""
    if isinstance(example_inputs, torch.Tensor):
        items: Sequence[Any] = (example_inputs,)
    elif isinstance(example_inputs, (tuple, list)) and example_inputs:
        items = example_inputs
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            if any(v < 1 for v in items):
                raise ConfigError(f"input shape sizes must be >= 1, got {tuple(items)}")
            shape = tuple(int(v) for v in items)
            t = torch.empty(shape, device="meta")
            return (t if device == "meta" else torch.randn(shape, device=device),)
    else:
        raise ConfigError(
            "example_inputs must be a tensor, a non-empty sequence of tensors "
            f"or a shape, got {type(example_inputs).__name__}"
        )
    if not all(isinstance(v, torch.Tensor) for v in items):
        raise ConfigError(
            "example_inputs must be all tensors or all ints (a shape), got "
            f"{[type(v).__name__ for v in items]}"
        )
    inputs = tuple(_to_device(v, device) for v in items)
    if inputs[0].dim() > 0 and inputs[0].shape[0] < 1:
        raise ConfigError(f"batch must be >= 1, got {inputs[0].shape[0]}")
    return inputs


def _copy_model(model: nn.Module, device: str) -> nn.Module:
    """A deep copy on ``device``; for meta, parameters and buffers are created
    directly as meta tensors (their data is never copied)."""
    memo: dict[int, Any] = {}
    if device == "meta":
        for p in model.parameters():
            if nn.parameter.is_lazy(p):
                raise ModelError(
                    "lazy modules must be initialised (run one forward) before counting"
                )
            memo[id(p)] = nn.Parameter(
                torch.empty_like(p, device="meta"), requires_grad=p.requires_grad
            )
        for b in model.buffers():
            memo[id(b)] = torch.empty_like(b, device="meta")
    try:
        net = copy.deepcopy(model, memo)
    except (TypeError, RuntimeError, copy.Error) as exc:
        raise ModelError(f"cannot copy {type(model).__name__} for counting: {exc}") from exc
    return net.to(device) if device != "meta" else net


def _module_key(name: str) -> str | None:
    """ModuleTracker name -> by_module key (``None``: not reported)."""
    prefix = "_Step.model"
    if name == prefix:
        return MODEL_KEY
    if name.startswith(prefix + "."):
        return name[len(prefix) + 1 :]
    if name == "_Step.loss":
        return LOSS_KEY
    return None


def _split(before: dict[Any, int], after: dict[Any, int]) -> dict[Any, tuple[int, int]]:
    keys = list(dict.fromkeys([*before, *after]))
    return {k: (before.get(k, 0), after.get(k, 0) - before.get(k, 0)) for k in keys}


def count_ops(
    model: nn.Module,
    example_inputs: Any,
    train: bool = True,
    loss: str = "cross_entropy",
    target: torch.Tensor | None = None,
    *,
    device: str = "meta",
    memo: bool = True,
) -> OpCount:
    """Count the operations of one step of ``model`` on ``example_inputs``.

    ``example_inputs``: a tensor, a sequence of tensors (positional inputs) or
    a shape such as ``(256, 3, 224, 224)`` for one float32 input; the first
    dimension of the first input is the batch size.  Inputs never require
    gradients (as for data), so no gradient is computed for them.
    ``train=True``: the model in training mode, forward + ``loss`` (one of
    ``"cross_entropy"`` (default target: class 0), ``"mse"`` (default target:
    zeros), ``"sum"``) + backward; ``train=False``: eval mode, forward only,
    under ``no_grad``.  ``device="meta"`` (default) allocates and computes
    nothing; ``"cpu"`` runs the real kernels (slow; to check that the meta
    device dispatches the same ops).  ``memo``: an op met before with the same arguments adds
    what it added then without running (:mod:`aihpc.counting.op_memo`; the same counts,
    two to three times faster); False runs every op.  ``model`` itself is never modified.
    Raises ConfigError for bad arguments, ModelError if the model cannot run.
    """
    _check_arguments(model, loss, device)
    inputs = _prepare_inputs(example_inputs, device)
    batch = int(inputs[0].shape[0]) if inputs[0].dim() > 0 else 1
    if target is not None and not isinstance(target, torch.Tensor):
        raise ConfigError(f"target must be a tensor or None, got {type(target).__name__}")
    net = _copy_model(model, device)
    net.train(train)
    step = _Step(
        net, loss if train else None, _to_device(target, device) if target is not None else None
    )

    tally = _MacTally()
    recorder = _OpRecorder()
    counter = FlopCounterMode(
        display=False, custom_mapping={p: tally.wrap(f) for p, f in FORMULAS.items()}
    )
    reuse = OpMemo(counter, recorder, tally) if memo else contextlib.nullcontext()
    try:
        with recorder, counter, reuse:
            with torch.enable_grad() if train else torch.no_grad():
                value = step(*inputs)
            forward_counts = counter.get_flop_counts()
            macs = tally.macs
            if train and isinstance(value, torch.Tensor) and value.requires_grad:
                value.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    except (RuntimeError, ValueError, NotImplementedError) as exc:
        raise _failed_to_run(model, exc, device) from exc
    all_counts = counter.get_flop_counts()
    return _assemble(net, forward_counts, all_counts, recorder, counter, batch, train, macs)


def _check_arguments(model: Any, loss: str, device: str) -> None:
    """ModelError for a model that is not a module, ConfigError for a loss or device not known."""
    if not isinstance(model, nn.Module):
        raise ModelError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if loss not in LOSSES:
        raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")


def _failed_to_run(model: nn.Module, exc: Exception, device: str) -> ModelError:
    """The one-line error for a model that failed while being counted on ``device``."""
    hint = (
        " (a model whose control flow depends on tensor values cannot run on the meta "
        "device; try device='cpu')"
        if device == "meta"
        else ""
    )
    return ModelError(
        f"{type(model).__name__} failed while being counted: "
        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        f"{hint}"
    )


def _assemble(
    net: nn.Module,
    fwd: dict[str, dict[Any, int]],
    both: dict[str, dict[Any, int]],
    recorder: _OpRecorder,
    counter: FlopCounterMode,
    batch: int,
    train: bool,
    macs: int,
) -> OpCount:
    by_operator: dict[str, dict[str, int]] = {}
    for packet, (f, b) in _split(fwd.get("Global", {}), both.get("Global", {})).items():
        if f or b:
            row = by_operator.setdefault(family(packet), {"forward": 0, "backward": 0})
            row["forward"] += f
            row["backward"] += b
    by_operator = dict(
        sorted(by_operator.items(), key=lambda kv: -(kv[1]["forward"] + kv[1]["backward"]))
    )

    module_totals: dict[str, tuple[int, int]] = {}
    for name in both:
        key = _module_key(name)
        if key is not None:
            f = sum(fwd.get(name, {}).values())
            module_totals[key] = (f, sum(both[name].values()) - f)
    forward = sum(r["forward"] for r in by_operator.values())
    backward = sum(r["backward"] for r in by_operator.values())
    if LOSS_KEY in module_totals:
        # ModuleTracker cannot see the backward of the loss (its output is the
        # root of autograd, whose grad hook never fires); everything _Step ran
        # in backward that was not the model's backward is the loss's.
        model_backward = module_totals.get(MODEL_KEY, (0, 0))[1]
        module_totals[LOSS_KEY] = (module_totals[LOSS_KEY][0], backward - model_backward)
    order = [MODEL_KEY, *(n for n, _ in net.named_modules() if n), LOSS_KEY]
    rank = {name: i for i, name in enumerate(order)}
    by_module = {
        k: {"forward": f, "backward": b}
        for k, (f, b) in sorted(module_totals.items(), key=lambda kv: rank.get(kv[0], len(rank)))
    }

    registered = counter.flop_registry
    uncounted = {
        op_name(p): n
        for p, n in sorted(recorder.calls.items(), key=lambda kv: str(kv[0]))
        if p not in registered and p not in KNOWN_ZERO
    }
    return OpCount(
        forward=forward,
        backward=backward,
        total=forward + backward,
        by_operator=by_operator,
        by_module=by_module,
        uncounted=uncounted,
        batch_size=batch,
        train=train,
        conv_linear_macs=macs,
    )
