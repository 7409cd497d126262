"""Each op counted once per distinct arguments: what :func:`aihpc.counting.count_ops` reuses.

On the meta device what an op adds to a count, and the shapes of what it
returns, follow from its arguments' metadata alone: the formulas read
shapes and scalars, and no data exists.  Running it there still costs
time: many meta kernels are Python (``torch._refs``, ``torch._decomp``),
and FlopCounterMode decomposes composite ops before counting them (batch
norm into some thirty aten ops).  A network runs the same op on the same
shapes again and again (every block of a residual stage, the batch norms
of the forward and of the backward), and the architectures a worker
counts share most of their layers' shapes with the ones before.

:class:`OpMemo` is a dispatch mode entered above the counter.  The first
time an op meets a key -- the op, the grad mode, the default dtype, and
every argument's shape, strides, storage offset, dtype, device and
``requires_grad`` (tensors) or value (anything else) -- it runs as it
would without the memo, and the memo keeps what that added: the counts by
op (the counter's ``Global`` row), the ops the recorder saw, the
multiply-accumulates the tally summed, and the shapes, strides and dtypes
of its outputs.  Met again, the op does not run: those counts go to every
module the counter's tracker is in at that moment, as the counter itself
adds them, and new meta tensors of the kept shapes are returned.  So the
count is the same integer for integer, in every row (``tests/counting/
test_op_memo.py`` compares whole :class:`~aihpc.counting.counter.OpCount`
objects, and the layered count of :mod:`aihpc.tasks.image.count`, which
does not use the memo, is held equal to the whole count on hundreds of
architectures).

Only ops whose every return is a new tensor are kept: a view, an in-place
or an ``out=`` op returns (a view of) an input, which autograd tracks, and
runs every time.  Only meta tensors are kept: on the CPU device
(``count_ops(device="cpu")``, the check that meta dispatches the same ops)
everything runs.  An argument whose key cannot be hashed (a symbolic
size) runs too.

The memo is the process's and is emptied when it holds :data:`LIMIT`
keys.  Measured on 2 cores, 2026-11-27 (``benchmarks/count_speed.py``, the
whole count of fresh architectures made as the search makes them, training
step and evaluation pass): 229 ms per architecture without the memo and
85 ms with it on the CPU workload's children of ResNet-20, 569 and 200 ms
on the GPU workload's children of ResNet-50; a language model's
(``benchmarks/lm_count_speed.py``) 141 and 76 ms.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

#: keys kept before the memo starts again (a key and its entry take a few hundred bytes)
LIMIT = 100_000

_Meta = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]


@dataclass(frozen=True, slots=True)
class _Entry:
    """What one op added to the count, and the metadata of its outputs."""

    counts: dict[Any, int]
    calls: Counter[Any]
    macs: int
    outputs: tuple[_Meta | None, ...]
    as_tuple: bool


_MEMO: dict[Any, _Entry] = {}
_KEPT: dict[Any, bool] = {}  # op -> whether its returns are all new tensors


def clear() -> None:
    """Empty the process's memo."""
    _MEMO.clear()


def size() -> int:
    """How many keys the process's memo holds."""
    return len(_MEMO)


def kept_ops() -> set[Any]:
    """The ops (``OpOverload``) of the keys the process's memo holds."""
    return {key[0] for key in _MEMO}


def _returns_new_tensors(func: Any) -> bool:
    kept = _KEPT.get(func)
    if kept is None:
        returns = func._schema.returns
        kept = bool(returns) and all(
            r.alias_info is None and str(r.type) in ("Tensor", "Optional[Tensor]") for r in returns
        )
        _KEPT[func] = kept
    return kept


def _arg_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.dtype,
            value.device.type,
            value.requires_grad,
        )
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_arg_key(v) for v in value))
    if isinstance(value, dict):
        return tuple(sorted((k, _arg_key(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def _key(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """The memo's key of this call; None where it cannot be hashed."""
    key = (
        func,
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        _arg_key(args),
        _arg_key(kwargs),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _on_meta(outputs: tuple[Any, ...]) -> bool:
    return all(
        o is None or (isinstance(o, torch.Tensor) and o.device.type == "meta") for o in outputs
    )


class OpMemo(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    """The memo of one count (module docstring): enter it after ``counter`` and ``recorder``.

    ``recorder.calls`` counts the ops that run (a ``Counter``); ``tally.macs`` sums the
    multiply-accumulates of the counted matrix products.
    """

    supports_higher_order_operators = True  # a higher-order op (torch.cond) runs, as views do

    def __init__(self, counter: FlopCounterMode, recorder: Any, tally: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counter, self.recorder, self.tally = counter, recorder, tally

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload) or not _returns_new_tensors(func):
            return func(*args, **kwargs)
        key = _key(func, args, kwargs)
        if key is None:
            return func(*args, **kwargs)
        entry = _MEMO.get(key)
        if entry is None:
            return self._run_and_keep(key, func, args, kwargs)
        return self._replay(entry)

    def _run_and_keep(self, key: Any, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run the op under the counter, and keep what it added where its outputs are meta."""
        flop_counts = self.counter.flop_counts
        # the Global row starts empty under the op, so that it holds exactly what the op added
        # (zeros too: a zero the counter adds still lists the op and its module)
        whole, flop_counts["Global"] = flop_counts["Global"], defaultdict(int)
        calls_before = Counter(self.recorder.calls)
        macs_before = self.tally.macs
        try:
            out = func(*args, **kwargs)
        finally:
            counts = dict(flop_counts["Global"])
            flop_counts["Global"] = whole
            for op, n in counts.items():
                whole[op] += n
        outputs = out if isinstance(out, tuple) else (out,)
        if not _on_meta(outputs):
            return out
        if len(_MEMO) >= LIMIT:
            _MEMO.clear()
        _MEMO[key] = _Entry(
            counts,
            self.recorder.calls - calls_before,
            self.tally.macs - macs_before,
            tuple(None if o is None else (tuple(o.shape), o.stride(), o.dtype) for o in outputs),
            isinstance(out, tuple),
        )
        return out

    def _replay(self, entry: _Entry) -> Any:
        """Add the kept counts where the counter would, and return new outputs of the kept
        shapes."""
        flop_counts = self.counter.flop_counts
        for module in set(self.counter.mod_tracker.parents) if entry.counts else ():
            row = flop_counts[module]  # a module's row exists where an op counted in it
            for op, n in entry.counts.items():
                row[op] += n
        self.recorder.calls.update(entry.calls)
        self.tally.macs += entry.macs
        outputs = tuple(
            None if m is None else torch.empty_strided(m[0], m[1], dtype=m[2], device="meta")
            for m in entry.outputs
        )
        return outputs if entry.as_tuple else outputs[0]
