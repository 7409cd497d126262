"""Regional compilation: a network compiled region by region, code cached by region structure.

Every trial of the search is a new architecture, a child made from its
parent by one small growth step, so compiling whole networks
(``torch.compile`` of the model) pays a full compilation per trial.  Here a
task cuts its network into regions (a CNN's stem, residual blocks and head,
:mod:`aihpc.tasks.image.regions`; a transformer's blocks,
:mod:`aihpc.tasks.language.regions`), each region is compiled on its own,
and its compiled code is kept under the region's *signature*, a hash of its
structure and input shape that ignores layer names.  A child then compiles
only the regions its growth changed; identical blocks (the several equal
blocks of a stage, in one network or in many) compile once.

Mechanism (:class:`RegionCache`): one ``torch.compile``-d function per cache
key, the key being the signature and everything else the compiled code
depends on (batch shape and layout, dtypes, device, train or eval mode,
grad mode, autocast, dropout rates).  The function runs
``torch.func.functional_call`` on a parameter-free template of the region
(built on the meta device) with the network's own parameters and buffers
as inputs, so one compiled graph serves every network holding that region
and the network's tensors (its ``state_dict``, the optimizer's view, BN
statistics updated in place) stay its own.  Each key gets its own code
object: dynamo keeps compiled code in a list on the code object, checks
guards down that list, and after ``recompile_limit`` (8) entries for one
code object (``accumulated_recompile_limit``, 256, even with
``isolate_recompiles``) runs the function eagerly without a word.  With a
code object per key each holds one entry, the lookup is a dict access, and
:meth:`RegionCache.stats` reads dynamo's own entries back to prove it (a
key whose code has no entry ran eagerly; more than one, recompiled).

The cache compiles any :class:`~aihpc.tasks.base.Compilable` (a signature
and a template module): it is the :class:`~aihpc.tasks.base.RegionRunner`
a task's regions run through.

What is reused where: in one process, a key compiled before is neither
traced nor compiled again (this module's cache).  Across the processes of a
node, inductor's on-disk caches (the FX graph cache of compiled kernels and
the AOTAutograd cache of forward/backward graphs, both keyed by the graph's
content) live in one folder, :func:`use_cache_dir`: a region another worker
compiled is still traced by dynamo here (about half a second a region on
this project's 2-core CPU) but its C++ or Triton code is loaded, not built.
"""

from __future__ import annotations

import os
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config
from torch import nn
from torch.func import functional_call

from aihpc.base.checks import integer
from aihpc.tasks.base import Compilable


def _region_call(
    template: nn.Module, tensors: dict[str, torch.Tensor], args: tuple[torch.Tensor, ...]
) -> Any:
    """What every compiled region runs; copied into one code object per cache key."""
    return functional_call(template, tensors, args)


#: A compiled region: (template, the network's tensors by local key, inputs) -> output.
RegionFn = Callable[[nn.Module, dict[str, torch.Tensor], tuple[torch.Tensor, ...]], torch.Tensor]


def _fresh_function(name: str) -> RegionFn:
    """:func:`_region_call` with a code object of its own, so that dynamo's cache (kept on the
    code object) holds this key's compiled code alone."""
    code = _region_call.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, _region_call.__globals__, name)


@dataclass(frozen=True)
class RegionStats:
    """What a :class:`RegionCache` did since it was made (or cleared).

    ``compiled``: keys compiled (cache misses), ``signatures``: distinct
    region signatures among them, ``hits``: region calls served by code
    compiled before, ``compile_seconds``: wall time of the misses' first
    calls (tracing and compiling, backward included).  Read from dynamo:
    ``graphs``, the compiled entries torch holds for the keys (one per key
    when all is well), ``recompiled``, keys torch compiled more than once
    (a guard the key does not cover), and ``eager``, keys torch holds no
    code for (fallen back to eager, or dropped by ``torch._dynamo.reset()``).
    """

    hits: int
    compiled: int
    signatures: int
    compile_seconds: float
    graphs: int
    recompiled: int
    eager: int


@dataclass
class _Entry:
    """One cache key's compiled function, the template it runs and its signature."""

    fn: RegionFn
    template: nn.Module
    signature: str


class RegionCache:
    """Compiled regions by key, for the life of the process (see the module docstring).

    ``backend``, ``mode`` and ``options`` go to ``torch.compile`` (with
    ``dynamic=False``: the batch shape is in the key; ``fullgraph=True``:
    a region that cannot be one graph raises instead of running in pieces).
    At most ``max_entries`` keys are kept, the least recently used dropped
    first.  Thread-safe: a miss compiles under a lock.
    """

    def __init__(
        self,
        backend: str | Callable[..., Any] = "inductor",
        *,
        mode: str | None = None,
        options: dict[str, Any] | None = None,
        max_entries: int = 4096,
    ) -> None:
        integer("max_entries", max_entries)
        self.backend, self.mode, self.options = backend, mode, options
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self.clear()

    def __deepcopy__(self, memo: dict[int, Any]) -> RegionCache:
        """The cache itself: a copied regional network shares its original's compiled code."""
        return self

    def clear(self) -> None:
        """Forget every compiled key and zero the counts."""
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._hits = self._compiled = 0
        self._signatures: set[str] = set()
        self._seconds = self._longest = 0.0

    def run(
        self,
        region: Compilable,
        tensors: dict[str, torch.Tensor],
        args: tuple[torch.Tensor, ...],
        training: bool,
        dropout: tuple[float, ...] = (),
    ) -> torch.Tensor:
        """``region`` applied to its inputs ``args`` with the network's ``tensors`` (local key
        -> tensor), in train or eval mode and with the dropout rates of its dropout layers (in
        order)."""
        key = _key(region.signature, args, tensors, training, dropout)
        entry = self._entries.get(key)
        if entry is not None:
            self._hits += 1
            self._entries.move_to_end(key)
            return entry.fn(entry.template, tensors, args)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:  # compiled by another thread meanwhile
                self._hits += 1
                return entry.fn(entry.template, tensors, args)
            entry = self._compile(key, region, training, dropout)
            start = time.perf_counter()
            # the backward is compiled with the forward, so its time is counted here
            with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
                out = entry.fn(entry.template, tensors, args)
            took = time.perf_counter() - start
            self._seconds += took
            self._longest = max(self._longest, took)
        return out

    def _compile(
        self, key: Hashable, region: Compilable, training: bool, dropout: tuple[float, ...]
    ) -> _Entry:
        with torch.device("meta"):
            template = region.template()
        template.train(training)
        rates = iter(dropout)
        for module in template.modules():
            if isinstance(module, nn.Dropout):
                module.p = next(rates)
        fn = torch.compile(
            _fresh_function(f"region_{region.signature}_{self._compiled}"),
            backend=self.backend,
            mode=self.mode,
            options=self.options,
            dynamic=False,
            fullgraph=True,
        )
        entry = _Entry(fn, template, region.signature)
        self._entries[key] = entry
        self._compiled += 1
        self._signatures.add(region.signature)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return entry

    def signatures(self) -> frozenset[str]:
        """The signatures of the regions compiled so far (in any mode or shape)."""
        return frozenset(self._signatures)

    def longest_seconds(self) -> float:
        """The longest one key's compilation took so far (0 before the first)."""
        return self._longest

    def stats(self) -> RegionStats:
        """The counts so far, dynamo's compiled entries for the keys read back now."""
        per_key = [_torch_entries(entry.fn) for entry in self._entries.values()]
        return RegionStats(
            hits=self._hits,
            compiled=self._compiled,
            signatures=len(self._signatures),
            compile_seconds=self._seconds,
            graphs=sum(per_key),
            recompiled=sum(1 for n in per_key if n > 1),
            eager=sum(1 for n in per_key if n == 0),
        )


def _torch_entries(fn: RegionFn) -> int:
    """How many compiled entries dynamo holds for a compiled function's code object."""
    import torch._dynamo.eval_frame

    inner = getattr(fn, "_torchdynamo_orig_callable", fn)
    return len(torch._dynamo.eval_frame._debug_get_cache_entry_list(inner.__code__))


def _key(
    signature: str,
    args: tuple[torch.Tensor, ...],
    tensors: dict[str, torch.Tensor],
    training: bool,
    dropout: tuple[float, ...],
) -> Hashable:
    """Everything the compiled code of a region depends on (what dynamo guards on) besides its
    signature: every input's shape, layout, dtype, device and need of gradients, every tensor's
    dtype, layout and need of gradients, the mode, grad mode and autocast."""
    device = args[0].device.type
    return (
        signature,
        tuple((tuple(x.shape), x.stride(), x.dtype, str(x.device), x.requires_grad) for x in args),
        tuple((t.dtype, t.stride(), t.requires_grad) for t in tensors.values()),
        training,
        torch.is_grad_enabled(),
        torch.is_autocast_enabled(device),
        torch.get_autocast_dtype(device),
        dropout,
    )


_DEFAULT: RegionCache | None = None


def default_cache() -> RegionCache:
    """The process-wide cache (inductor), shared by every model the trainer compiles."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = RegionCache()
    return _DEFAULT


def use_cache_dir(folder: str | os.PathLike[str]) -> Path:
    """Keep inductor's on-disk caches in ``folder`` (made if missing) and turn them on.

    Call it in each worker before its first compilation, with one folder per
    node on a local disk (``TORCHINDUCTOR_CACHE_DIR`` if set, or the job's
    node-local scratch): the FX graph cache (compiled kernels) and the
    AOTAutograd cache (forward and backward graphs) there are shared by the
    node's workers, so a region one worker compiled loads in the others.
    Inductor's default, ``<tmp>/torchinductor_<user>``, is per node too but
    moves with ``TMPDIR``, which batch systems often set per job.
    """
    import torch._inductor.config

    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    torch._inductor.config.fx_graph_cache = True
    torch._functorch.config.enable_autograd_cache = True
    return path
