"""Operations per sample of an architecture, counted layer by layer with a memo.

:func:`count_spec_per_sample` returns exactly (bit for bit) what
:func:`aihpc.train.sample_ops.count_ops_per_sample` returns -- (training-step
operations per sample, evaluation-forward operations per sample) -- without
building or tracing the whole network: a walk over its layers (about 0.3 ms
for a ResNet-50 child of ~190 layers) once the layers it is made of have
been seen, where the whole-network count takes 85 to 200 ms
(``benchmarks/count_speed.py``).  ``aihpc verify`` recounts every trial of a
run with it: the architecture search never repeats an architecture, but
its children share nearly all their layers with their parents.

Decomposition
-------------
``count_ops`` runs the :class:`~aihpc.tasks.image.build.SpecNet` and its
cross-entropy loss on the meta device under FlopCounterMode, and its total
is the sum, over every aten op that ran (forward and backward), of that op's
formula, which depends only on the op's arguments (shapes and scalars).
Every op that runs belongs to exactly one of these:

* a layer's forward: the ops of ``SpecNet``'s step for that layer (its
  module, or :func:`~aihpc.tasks.image.build.stateless_step`), which depend only on
  the layer's type and fields (not its name), the shapes of its inputs,
  the batch size, train or eval mode (batch norm), and the dropout rate the
  trial gives every dropout layer;
* a layer's backward: the backward functions autograd recorded for that
  step, which depend on the same, plus which of its inputs require a
  gradient (the network input does not; a value requires one when it is
  produced by a layer with parameters -- conv, bn, dense -- or from a value
  that does), and on the shape of the gradient arriving at its output,
  which is its output's shape;
* the loss: cross entropy of the logits (forward), the backward seed (a
  constant fill) and the loss's backward, which depend on the batch, the
  number of classes and whether the logits require a gradient;
* gradient accumulation: where a value that requires a gradient feeds
  ``k`` edges that each send it one (consumers, counted once per input slot
  they read it in, and the loss for the output), the autograd engine adds
  them: ``k - 1`` additions of a tensor of its shape;
* nothing else: no op runs between layers (SpecNet's forward only looks
  values up and drops them), parameter gradients are stored without
  arithmetic (no parameter is shared between layers, and they start with no
  gradient), and the backward seed is a fill.

So each part is counted on its own by running it under the same
FlopCounterMode with the same :data:`~aihpc.counting.registry.FORMULAS`:
a layer alone, on meta inputs of its shapes (leaves, requiring a gradient
where the layer's inputs do in the network), forward and then backward from
a gradient of its output's shape; the loss through ``count_ops``'s own
``_Step``; an accumulation by letting the engine add ``k`` gradients into one
tensor.  The same ops run with the same arguments, so each part's integer
is the one it contributes to the whole count, and the sums are equal
integers; divided by the batch size as ``count_ops_per_sample`` divides
them, they give the same floats.  Each part is memoised process-wide by
its signature, so an architecture whose layers have all been seen costs a
walk over its layers.

Dropout.  A trial's dropout rate, which every dropout layer takes, is drawn
from a continuous range, so no two trials share it; a dropout layer is
memoised by the rate's case instead: 0, 1, or strictly between.  torch's dropout
branches on exactly those (rate 0 returns the input itself, rate 1
multiplies by zero, any other rate draws a mask with ``bernoulli_``, scales
it with ``div_`` and multiplies), and for every rate strictly between 0 and 1
it runs the same ops on the same shapes, whose formulas read only shapes:
the count of the first rate seen is every such rate's.  (A rate outside
[0, 1] is its own key, and raises when counted.)  A dropout layer with rate
0 returns its input itself in training, so its consumers' gradients go
straight to its input's; the accumulations are then one tensor's instead of
two of the same shape, but their number, ``(k_in - 1) + (k_out - 1)``, is
the same.

``tests/counting/test_layered.py`` holds the whole thing equal to
``count_ops_per_sample`` on the seeds, on morphed children and on networks
made to use every layer type and join.  The memo and the one
FlopCounterMode it counts with are the process's: call it from one thread
at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from aihpc.base.checks import integer
from aihpc.base.errors import ModelError
from aihpc.counting.counter import _Step
from aihpc.counting.registry import FORMULAS
from aihpc.tasks.image.build import make_module, stateless_step
from aihpc.tasks.image.layer import INPUT, Layer, filled
from aihpc.tasks.image.spec import ArchSpec, Shape

__all__ = ["count_spec", "count_spec_per_sample"]

_META = torch.device("meta")
# the layer types with parameters: their output requires a gradient whatever their input
_PARAMETRIC = frozenset(("conv", "bn", "dense"))
_BETWEEN = "0 < p < 1"  # the memo key of every dropout rate strictly between 0 and 1

_COUNTER: FlopCounterMode | None = None
# (type, fields, dropout, input shapes, inputs requiring a gradient, batch) -> (train, eval)
_LAYERS: dict[tuple[object, ...], tuple[int, int]] = {}
# (batch, classes, logits require a gradient) -> the loss's forward and backward
_LOSS: dict[tuple[int, int, bool], int] = {}
# (batch, shape, gradients) -> the additions that sum them
_ACCUMULATE: dict[tuple[int, Shape, int], int] = {}


def count_spec_per_sample(spec: ArchSpec, batch: int, dropout: float) -> tuple[float, float]:
    """Operations per sample of ``spec`` at batch size ``batch`` with every dropout layer's
    rate set to ``dropout``: (training step, evaluation forward), equal to
    :func:`aihpc.train.sample_ops.count_ops_per_sample`'s.

    ConfigError for a batch that is not an integer >= 1; ModelError where a layer cannot
    run (e.g. a dropout rate outside [0, 1]).
    """
    train, evaluate = count_spec(spec, batch, dropout)
    return train / batch, evaluate / batch


def count_spec(spec: ArchSpec, batch: int, dropout: float | None) -> tuple[int, int]:
    """The operations of ``spec`` on a minibatch of ``batch``: (training step, evaluation
    forward), the totals ``count_ops`` gives for ``SpecNet(spec)`` (train=True, then False).

    Every dropout layer at rate ``dropout``, as a trial sets it; None leaves each at its own
    rate, as ``SpecNet`` builds it (a proxy screening's candidates).  Errors as
    :func:`count_spec_per_sample`'s.
    """
    integer("batch", batch, what=">= 1")
    shapes = spec.shapes()
    requires = {INPUT: False}
    edges: dict[str, int] = {}
    train = evaluate = 0
    for name in spec.topological_order():
        layer = spec.layer(name)
        in_shapes = tuple(shapes[src] for src in layer.inputs)
        needs = tuple(requires[src] for src in layer.inputs)
        layer_train, layer_eval = _layer_ops(layer, in_shapes, needs, batch, _rate(layer, dropout))
        train += layer_train
        evaluate += layer_eval
        requires[name] = layer.type in _PARAMETRIC or any(needs)
        for src in layer.inputs:
            edges[src] = edges.get(src, 0) + 1
    logits_grad = requires[spec.output]
    edges[spec.output] = edges.get(spec.output, 0) + 1  # the loss
    train += _loss_ops(batch, spec.num_classes, logits_grad)
    for name, k in edges.items():
        if k > 1 and requires[name]:
            train += _accumulate_ops(batch, shapes[name], k)
    return train, evaluate


@contextmanager
def _counting(what: str) -> Iterator[Callable[[], int]]:
    """Count what runs inside, by the counter's formulas; yields a function that reads the
    operations counted so far.  ModelError (naming ``what``) if it fails, as ``count_ops``."""
    global _COUNTER
    if _COUNTER is None:  # made once (a millisecond); entering it clears its counts
        _COUNTER = FlopCounterMode(
            display=False, custom_mapping={p: f.ops for p, f in FORMULAS.items()}
        )
    counter = _COUNTER
    try:
        with counter:
            yield counter.get_total_flops
    except (RuntimeError, ValueError, NotImplementedError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{what} failed while being counted: {first}") from exc


def _layer_ops(
    layer: Layer,
    in_shapes: tuple[Shape, ...],
    needs: tuple[bool, ...],
    batch: int,
    dropout: float,
) -> tuple[int, int]:
    """(train forward + backward, eval forward) operations of one layer, memoised."""
    key = (
        layer.type,
        layer.out_channels,
        layer.kernel_size,
        layer.stride,
        layer.padding,
        layer.groups,
        layer.bias,
        layer.out_features,
        _dropout_case(dropout) if layer.type == "dropout" else None,
        in_shapes,
        needs,
        batch,
    )
    found = _LAYERS.get(key)
    if found is None:
        found = _LAYERS[key] = _count_layer(layer, in_shapes, needs, batch, dropout)
    return found


def _rate(layer: Layer, dropout: float | None) -> float:
    """The dropout rate ``layer`` is counted at: ``dropout``, or its own where that is None (only
    a dropout layer reads it)."""
    if dropout is not None:
        return dropout
    return filled(layer.p) if layer.type == "dropout" else 0.0


def _dropout_case(p: float) -> object:
    """The memo key of a dropout rate: 0 and 1 as themselves, any rate strictly between them as
    one key (see the module docstring), anything else (an error when counted) as itself."""
    return _BETWEEN if 0.0 < p < 1.0 else p


def _count_layer(
    layer: Layer,
    in_shapes: tuple[Shape, ...],
    needs: tuple[bool, ...],
    batch: int,
    dropout: float,
) -> tuple[int, int]:
    """One layer run alone as SpecNet runs it: (in training, forward and then backward from a
    gradient of its output's shape, its inputs requiring a gradient as ``needs`` says; in eval,
    the forward under no_grad)."""
    with _META:
        module = make_module(layer, in_shapes[0])
    if isinstance(module, nn.Dropout):
        module.p = dropout

    def step(train: bool) -> torch.Tensor:
        inputs = [
            torch.zeros((batch, *shape), device=_META, requires_grad=train and need)
            for shape, need in zip(in_shapes, needs, strict=True)
        ]
        if module is None:
            return stateless_step(layer.type, inputs)
        module.train(train)
        out: torch.Tensor = module(inputs[0])
        return out

    with _counting(f"layer {layer.name!r} ({layer.type})") as total:
        with torch.no_grad():
            step(train=False)
        evaluate = total()
        with torch.enable_grad():
            out = step(train=True)
        if out.requires_grad:
            # torch leaves Tensor.backward unannotated
            out.backward(torch.zeros_like(out))  # type: ignore[no-untyped-call]
        return total() - evaluate, evaluate


def _loss_ops(batch: int, classes: int, logits_grad: bool) -> int:
    """The loss of ``count_ops`` (cross entropy against class 0) on ``(batch, classes)``
    logits: forward, and the backward from its seed when the logits require a gradient."""
    key = (batch, classes, logits_grad)
    found = _LOSS.get(key)
    if found is None:
        logits = torch.zeros((batch, classes), device=_META, requires_grad=logits_grad)
        target = torch.zeros(batch, dtype=torch.long, device=_META)
        step = _Step(nn.Identity(), "cross_entropy", target)

        with _counting("the loss") as total:
            with torch.enable_grad():
                value = step(logits)
            if value.requires_grad:
                value.backward()
            found = _LOSS[key] = total()
    return found


def _accumulate_ops(batch: int, shape: Shape, k: int) -> int:
    """The operations of the autograd engine summing ``k`` gradients of a value of ``shape``
    (per sample): ``k`` views of one tensor, each given its own gradient."""
    key = (batch, shape, k)
    found = _ACCUMULATE.get(key)
    if found is None:
        base = torch.zeros((batch, *shape), device=_META, requires_grad=True)
        grads = [torch.zeros((batch, *shape), device=_META) for _ in range(k)]

        with _counting("gradient accumulation") as total:
            with torch.enable_grad():
                value = base.clone()
                views = [value.view_as(value) for _ in range(k)]
            torch.autograd.backward(views, grads)
            found = _ACCUMULATE[key] = total()
    return found
