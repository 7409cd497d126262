"""Regional compilation: a network compiled block by block, code cached by block structure.

Every trial of the search is a new architecture, a child made from its
parent by one small morphism, so compiling whole networks (``torch.compile``
of the :class:`~aihpc.nas.build.SpecNet`) pays a full compilation per trial.
Here the network is cut into a chain of regions (:func:`partition`: the
stem, each residual block, the head), each region is compiled on its own,
and its compiled code is kept under the region's *signature*, a hash of its
structure and input shape that ignores layer names.  A child then compiles
only the regions its morphism changed; identical blocks (the several equal
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

The cache compiles any :class:`Compilable` (a signature and a template
module): a CNN's :class:`Region` here, a transformer block in
:mod:`aihpc.train.lm_regions`.

What is reused where: in one process, a key compiled before is neither
traced nor compiled again (this module's cache).  Across the processes of a
node, inductor's on-disk caches (the FX graph cache of compiled kernels and
the AOTAutograd cache of forward/backward graphs, both keyed by the graph's
content) live in one folder, :func:`use_cache_dir`: a region another worker
compiled is still traced by dynamo here (about half a second a region on
this project's 2-core CPU) but its C++ or Triton code is loaded, not built.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch._functorch.config
from torch import nn
from torch.func import functional_call

from aihpc.base.checks import integer
from aihpc.nas.build import STATELESS, SpecNet, make_module, stateless_step
from aihpc.nas.layer import INPUT, Layer, canonical
from aihpc.nas.spec import ArchSpec, Shape

#: Hex digits of a region's signature (64 bits: no collision among the regions of a search).
SIGNATURE_CHARS = 16


@dataclass(frozen=True)
class Region:
    """A run of consecutive layers of a spec's plan that reads one value and leaves one.

    ``names`` are the spec's layer names in execution order, ``input`` the
    value read (a layer name or ``"input"``), ``output`` the last layer.
    ``local`` are the same layers renamed ``l0``, ``l1``, ... with the input
    called ``"input"``, and ``shapes`` their per-sample output shapes; the
    ``signature`` hashes ``in_shape`` and ``local``, so equal blocks in two
    networks, or twice in one, share it.
    """

    names: tuple[str, ...]
    input: str
    output: str
    in_shape: Shape
    local: tuple[Layer, ...]
    shapes: tuple[Shape, ...]
    signature: str

    def template(self) -> nn.Module:
        """The region as a module of its own (:class:`RegionModule`), on torch's current device."""
        return RegionModule(self)


class Compilable(Protocol):
    """What :class:`RegionCache` compiles: a ``signature`` (equal for regions computing the same
    function of the same tensors) and a ``template()``, the module computing it, built on the
    meta device, whose keys name the tensors :meth:`RegionCache.run` is given."""

    @property
    def signature(self) -> str: ...

    def template(self) -> nn.Module: ...


def partition(spec: ArchSpec) -> tuple[Region, ...]:
    """Cut the plan of ``SpecNet(spec)`` into a chain of regions.

    A cut may fall after a layer only where its output is the one value
    still live (every later layer reads it or values made after it).  Of
    those points, a cut is made where the value is read by several layers
    (a residual block starts: its body and its shortcut) and where a
    feature map is about to be pooled flat (the head starts), so a ResNet
    gives stem, blocks and head, and a plain chain of layers stays one
    region (each region is a compiled graph; fewer, larger graphs fuse
    more).  A network whose skips span everything is one region.

    Where that value is a relu's output and the relu alone reads its input,
    the cut goes before the relu, which then opens the next region: a
    graph that ends in a relu saves its mask for the backward pass (the
    partitioner does not count the output it keeps anyway), and inductor's
    CPU code stores such boolean masks some 15x slower than eager does, which
    made regional training steps 1.8x slower than whole-model ones here.
    A block's region thus runs from the relu before it to its sum.
    """
    order = spec.topological_order()
    shapes = spec.shapes()
    last_use: dict[str, int] = {}
    readers: dict[str, int] = {}
    for step, name in enumerate(order):
        for src in set(spec.layer(name).inputs):
            last_use[src] = step
            readers[src] = readers.get(src, 0) + 1
    last_use[spec.output] = len(order)  # the output stays live to the end
    live = 1  # the network input
    cuts: list[int] = []  # the last step of each region
    for step, name in enumerate(order[:-1]):
        live += 1
        live -= sum(1 for src in set(spec.layer(name).inputs) if last_use[src] == step)
        starts_head = len(shapes[name]) == 3 and len(shapes[order[step + 1]]) == 1
        if live == 1 and (readers[name] > 1 or starts_head):
            layer = spec.layer(name)
            before = step - 1  # the relu's input, if the relu alone reads it
            if (
                layer.type == "relu"
                and before >= 0
                and layer.inputs[0] == order[before]
                and readers[order[before]] == 1
                and before > (cuts[-1] if cuts else -1)
            ):
                step = before
            cuts.append(step)
    cuts.append(len(order) - 1)
    regions: list[Region] = []
    start, source = 0, INPUT
    for step in cuts:
        regions.append(_region(spec, order[start : step + 1], source))
        start, source = step + 1, order[step]
    return tuple(regions)


def _region(spec: ArchSpec, names: Sequence[str], source: str) -> Region:
    """The region of layers ``names`` reading ``source``, renamed and hashed."""
    local_name = {source: INPUT, **{name: f"l{k}" for k, name in enumerate(names)}}
    shapes = spec.shapes()
    local: list[Layer] = []
    for name in names:
        data = spec.layer(name).to_dict()
        data.update(name=local_name[name], inputs=[local_name[i] for i in data["inputs"]])
        local.append(Layer.from_dict(data))
    in_shape = shapes[source]
    text = canonical({"in_shape": list(in_shape), "layers": [x.to_dict() for x in local]})
    return Region(
        names=tuple(names),
        input=source,
        output=names[-1],
        in_shape=in_shape,
        local=tuple(local),
        shapes=tuple(shapes[n] for n in names),
        signature=hashlib.sha256(text.encode("ascii")).hexdigest()[:SIGNATURE_CHARS],
    )


class RegionModule(nn.ModuleDict):
    """A region as a module of its own, layers keyed by local name (``l0``, ``l1``, ...).

    Its forward pass is :class:`SpecNet`'s, step for step (same modules, same
    order of additions), so it computes exactly what those layers of the
    network compute.  Built on the meta device it is the parameter-free
    template that :class:`RegionCache` compiles.
    """

    def __init__(self, region: Region) -> None:
        super().__init__()
        shape_of = {INPUT: region.in_shape}
        shape_of.update((x.name, s) for x, s in zip(region.local, region.shapes, strict=True))
        for layer in region.local:
            module = make_module(layer, shape_of[layer.inputs[0]])
            if module is not None:
                self.add_module(layer.name, module)
        self._plan = tuple((x.name, x.type, x.inputs) for x in region.local)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values: dict[str, torch.Tensor] = {INPUT: x}
        for name, kind, inputs in self._plan:
            if kind in STATELESS:
                values[name] = stateless_step(kind, [values[src] for src in inputs])
            else:
                values[name] = self[name](values[inputs[0]])
        return values[self._plan[-1][0]]


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
        """The cache itself: a copied :class:`RegionNet` shares its original's compiled code."""
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
    """The process-wide cache (inductor), shared by every :class:`RegionNet` built without one."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = RegionCache()
    return _DEFAULT


class RegionNet(nn.Module):
    """Computes what ``net`` computes, region by region through ``cache``'s compiled code.

    It holds ``net`` as its one submodule and uses ``net``'s parameters and
    buffers themselves: its ``state_dict`` (keys prefixed ``net.``), the
    optimizer built on ``net`` and the weight files are those of ``net``.
    ``train()``/``eval()`` reach ``net``, whose mode each call reads.
    Do not call ``torch._dynamo.reset()`` while it is used: that drops the
    compiled code behind the cache's back (:class:`RegionStats` ``eager``).
    """

    def __init__(self, net: SpecNet, cache: RegionCache | None = None) -> None:
        super().__init__()
        self.net = net
        self.cache = cache or default_cache()
        self.regions = partition(net.spec)
        self._bindings = tuple(_binding(net, region) for region in self.regions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        training = self.net.training
        for region, (slots, dropouts) in zip(self.regions, self._bindings, strict=True):
            tensors = {key: getattr(module, attr) for key, module, attr in slots}
            rates = tuple(float(m.p) for m in dropouts)
            x = self.cache.run(region, tensors, (x,), training, rates)
        return x


def _binding(
    net: SpecNet, region: Region
) -> tuple[tuple[tuple[str, nn.Module, str], ...], tuple[nn.Dropout, ...]]:
    """Where a region's tensors live in ``net``: (template key, module, attribute) for every
    parameter and buffer, read at each call (``.to()`` replaces buffers), and its dropout
    modules, whose rate the trainer sets after building."""
    slots: list[tuple[str, nn.Module, str]] = []
    dropouts: list[nn.Dropout] = []
    for name, layer in zip(region.names, region.local, strict=True):
        if name not in net:
            continue
        module = net[name]
        for attr, _ in module.named_parameters(recurse=False):
            slots.append((f"{layer.name}.{attr}", module, attr))
        for attr, _ in module.named_buffers(recurse=False):
            slots.append((f"{layer.name}.{attr}", module, attr))
        if isinstance(module, nn.Dropout):
            dropouts.append(module)
    return tuple(slots), tuple(dropouts)


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
