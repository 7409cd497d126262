"""The one interface through which the runner, the trainer, the counter and the records see a
task of the AutoML benchmark.

A task is what the search searches and how a model of it is judged: its
architectures and their function-preserving growth, its data, its quality
measure, its counting, its settings and the words a report uses for it.  Two
are built in: ``image`` (classification, CNNs grown by network morphism:
AIPerf's) and ``lm`` (language modelling, decoder-only transformers grown by
exact operators); :func:`aihpc.tasks.register` adds others.  Code that needs a
task-specific answer asks the run's task for it (the object the run resolved
once, :func:`aihpc.tasks.task_of`), never branches on its name.

A task is stateless (its class makes it, :func:`aihpc.tasks.load_task`) and
its module imports torch inside its methods, so that naming it (``aihpc
--help``, reading a configuration) stays fast.

The contract, per method: units, what never changes, who calls it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aihpc.base.config import RunConfig, TaskOptions
from aihpc.base.fmt import format_value
from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.codec import Record
from aihpc.records.messages import DataRef
from aihpc.records.trial import Hyperparameters
from aihpc.scoring.quality import Quality
from aihpc.tasks.quality import ReportQuality

# torch and numpy are imported where a task trains or counts, not where it is named
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch

    from aihpc.nas.moments import Growth

#: The data set as :meth:`Task.inspect_data` describes it: results.json's ``data``, a JSON
#: object whose keys are the task's and its data set's (``num_train``, ``num_val``,
#: ``max_params``... the image task's data sets add their own), read back from the store or
#: results.json.
DataInfo = dict[str, Any]
#: A network's weights by name (``state_dict()``), as a morphism reads and writes them.
StateDict = dict[str, "torch.Tensor"]


class Arch(Protocol):
    """An architecture: a frozen, validated, hashed value (an ArchSpec or an LMSpec); a task
    takes back only its own (:meth:`Task.arch` makes one from ``to_dict()``)."""

    def to_dict(self) -> dict[str, Any]:
        """The architecture as JSON (what :meth:`Task.arch` reads)."""
        ...

    def content_hash(self) -> str:
        """The digest of ``to_dict()``: equal for equal architectures."""
        ...

    def num_params(self) -> int:
        """Parameters of a network of this architecture."""
        ...


#: Hex digits of a compiled region's signature (64 bits: no collision among the regions of a
#: search).
SIGNATURE_CHARS = 16


def canonical(value: Any) -> str:
    """JSON with keys sorted, no whitespace, ASCII only, no NaN: the form an architecture's
    ``content_hash`` and a region's signature digest."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def signature(text: str) -> str:
    """A compiled region's signature: the first :data:`SIGNATURE_CHARS` hex digits of the
    SHA-256 of ``text`` (its :func:`canonical` description)."""
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:SIGNATURE_CHARS]


class Compilable(Protocol):
    """A region of a task's network that the trainer's cache compiles: a ``signature`` (equal for
    regions computing the same function of the same tensors) and a ``template()``, the module
    computing it, built on the meta device, whose keys name the tensors it is run with."""

    @property
    def signature(self) -> str: ...

    def template(self) -> torch.nn.Module: ...


class RegionRunner(Protocol):
    """What a task's compiled regions run through (:class:`aihpc.train.regions.RegionCache`)."""

    def run(
        self,
        region: Compilable,
        tensors: dict[str, torch.Tensor],
        args: tuple[torch.Tensor, ...],
        training: bool,
        dropout: tuple[float, ...] = (),
    ) -> torch.Tensor:
        """``region`` applied to ``args`` with the network's ``tensors`` (its template's keys),
        in train or eval mode, its dropout layers at the ``dropout`` rates in order."""
        ...


#: An autocast context, or nothing.
Autocast = contextlib.AbstractContextManager[object]


@dataclass(frozen=True)
class StepModel:
    """What a trial's training steps call (``module``: the model, or a faster way of computing
    it), under ``autocast``; the passes (``"train"``, ``"eval"``) whose first run compiles, and
    the compiled regions those first runs call.  The weights the optimizer steps, the weight
    files hold and the growth steps read are always the model's own."""

    module: torch.nn.Module
    autocast: Autocast
    compiled_modes: tuple[str, ...] = ()
    regions_needed: int = 0


def other_fields(arch: Mapping[str, Any], shown: set[str]) -> list[tuple[str, str]]:
    """An architecture's fields but ``shown``, as a report lists them: ``("arch.<key>", value)``
    in key order."""
    return [(f"arch.{k}", format_value(v)) for k, v in sorted(arch.items()) if k not in shown]


def device_autocast(device: torch.device) -> Autocast:
    """bfloat16 autocast on a GPU, nothing elsewhere: how a model trains unless its task says
    otherwise."""
    import torch

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


#: One planned growth step: (child, its maps of the parent's weights and optimizer state,
#: description).
Plan = tuple[Arch, "Growth", str]


class Normalizer(Protocol):
    """What staging applies to a chunk of raw images (float32, in place)."""

    def apply_(self, x: torch.Tensor) -> torch.Tensor: ...


class Split(Protocol):
    """One split of a data set as staging reads it (:mod:`aihpc.train.staging`): ``len`` samples
    of ``sample_shape``, values of ``dtype`` (numpy's) from ``raw(positions)``, labels from
    ``label(positions)``, and a ``normalizer`` (None: the values are staged as they are)."""

    @property
    def sample_shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> npt.DTypeLike: ...

    @property
    def normalizer(self) -> Normalizer | None: ...

    def __len__(self) -> int: ...

    def raw(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]: ...

    def label(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]: ...


class Task(Protocol):
    """A task of the AutoML benchmark (the module docstring)."""

    #: its name, as ``RunConfig.run.task`` and a saved architecture's ``"kind"`` give it
    name: str
    #: the data sets the task trains on (``RunConfig.run.dataset``)
    datasets: tuple[str, ...]
    #: gradients clipped to this norm in every step (None: not clipped)
    grad_clip: float | None
    #: the MLPerf log's submission_benchmark (its rules: mlperf/rules/<name>.yaml)
    mlperf_benchmark: str
    #: the kinds of dense kernel its networks call, whose best rate is the run's measured peak
    #: (aihpc.roofline.kernels.KINDS)
    peak_kernels: tuple[str, ...]
    #: whether its models compile (``RunConfig.compile``) when the run leaves it open, by device
    #: kind ("cpu", "cuda"): the faster way as measured on that kind of device
    compile_auto: Mapping[str, bool]
    #: its own settings, ``RunConfig.options`` (the type reads them: :class:`TaskOptions`)
    options_type: type[TaskOptions]
    #: the kind of input its models read, as the zoo names it (``aihpc.models.INPUT_KINDS``): a
    #: zoo model of that kind is served as this task's (:func:`aihpc.tasks.serving`)
    input_kind: str
    #: whether its models answer a query by generating tokens (``aihpc infer``: a prefill, then
    #: one step a token, :meth:`decode_ops`) rather than by one forward pass
    generates: bool
    #: how a report reads, ranks and writes its quality (:mod:`aihpc.report`)
    report_quality: ReportQuality
    #: the record of what :meth:`inspect_data` describes, as results.json's and the store's
    #: ``data`` hold it (:mod:`aihpc.records.run_data`)
    data_record: type[Record]

    # -- the run (aihpc.runner) -------------------------------------------------------------
    def default_workload(self, config: RunConfig, device: str) -> RunConfig:
        """``config`` with what it left unset sized to ``device`` ("cpu" or "cuda")."""
        ...

    def inspect_data(self, config: RunConfig, device: str) -> DataInfo:
        """The data set checked once in the master (ConfigError, DataError) and described:
        results.json's ``data`` (``num_train``, ``num_val`` in samples, ``max_params``...)."""
        ...

    def quality(self, config: RunConfig, data: DataInfo) -> Quality:
        """How the run's models are judged, from the configuration and :meth:`inspect_data`."""
        ...

    def search_space(self, config: RunConfig) -> SearchSpace:
        """The hyperparameters TPE draws for a trial, and the fixed ones."""
        ...

    def default_hparams(self, config: RunConfig) -> Hyperparameters:
        """The hyperparameters a trial trains with when nothing searches them (strategy "seed",
        the baseline): the usual values for the task's networks, within :meth:`search_space`'s
        ranges, so that TPE can be told the trial's result."""
        ...

    def min_train_ops(self, arch: Arch, data: DataInfo) -> float:
        """The operations a network of ``arch`` needs to be worth training on the data
        :meth:`inspect_data` described: the compute-optimal size for a budget of B operations
        is the largest whose ``min_train_ops`` is within B (the growth of
        :mod:`aihpc.runner.search.growth`).  Counted as the run counts (training operations per
        sample, :meth:`recount_per_sample`); the rule, per task, in its docstring."""
        ...

    # -- architectures (aihpc.runner.search.proposals, the worker's replay of a recipe) ------------
    def seed_arch(self, data: DataInfo) -> Arch:
        """The first trial's architecture for the data :meth:`inspect_data` described."""
        ...

    def arch(self, data: dict[str, Any]) -> Arch:
        """The architecture of its ``to_dict()`` (SpecError if it is not one of this task's)."""
        ...

    def arch_reader(self) -> Callable[[dict[str, Any]], Arch]:
        """What reads the many related architectures of one run (``aihpc verify``'s trials) as
        :meth:`arch` does, sharing their parts where the task's architectures can."""
        ...

    def plan(self, arch: Arch, rng: random.Random, max_params: int | None) -> Plan:
        """One random function-preserving growth step, all draws from ``rng`` (MorphError)."""
        ...

    # -- models and their operations (aihpc.train, aihpc.verify) ----------------------------
    def model(self, arch: Arch) -> torch.nn.Module:
        """A freshly initialised network of ``arch`` (on torch's current default device)."""
        ...

    def model_input(self, arch: Arch) -> tuple[tuple[int, ...], int | None]:
        """One sample's input to a network of ``arch``: its shape, and the vocabulary where the
        input is token ids (None: real values) (``aihpc count``, ``aihpc export``)."""
        ...

    def step_model(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        world: int,
        cache: RegionRunner | None,
    ) -> StepModel:
        """What the training steps of ``model`` call on ``device`` in ``world`` data-parallel
        processes: compiled region by region through ``cache`` where it is given (None: not
        compiled)."""
        ...

    def region_signatures(self, arch: Arch) -> frozenset[str]:
        """The signatures of the regions a compiled model of ``arch`` runs (what
        :meth:`step_model` compiles; empty where nothing compiles)."""
        ...

    def count_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        """Operations per sample of a training step (forward, loss, backward) and of an
        evaluation forward pass, counted analytically at the trial's batch size (the worker's)."""
        ...

    def model_flops(self, arch: Arch, train_samples: int) -> float | None:
        """The model FLOPs of training on ``train_samples`` samples by the convention the task's
        papers report utilisation in (language models: 6N + 12·L·H·Q·T per token, PaLM
        appendix B); None where the task has none (images: the counted operations are it)."""
        ...

    def recount_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        """Exactly :meth:`count_per_sample`'s numbers, made fast for the many related
        architectures of a run (``aihpc verify``, the scale rehearsal)."""
        ...

    # -- data (aihpc.train.staging, the trainer) --------------------------------------------
    def splits(self, ref: DataRef) -> tuple[Split, Split]:
        """The training and validation splits of the data set ``ref`` names."""
        ...

    def staging_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype a worker stages the data in on ``device``."""
        ...

    def sample_shape(self, arch: Arch) -> tuple[int, ...]:
        """The shape of one staged sample a network of ``arch`` trains on (what
        :meth:`inputs_and_targets` takes a batch of): the host memory estimate's
        (:mod:`aihpc.train.memory`)."""
        ...

    def epoch_samples(self, ref: DataRef, train_samples: int) -> int:
        """How many training samples one epoch of data set ``ref`` trains on, of
        ``train_samples``."""
        ...

    def augment(self, xb: torch.Tensor, ref: DataRef, gen: torch.Generator) -> torch.Tensor:
        """A staged training batch of data set ``ref`` as the network trains on it: changed in
        ways that keep its targets, by random numbers from ``gen`` (a generator on the batch's
        device), or as it is where the task has no augmentation."""
        ...

    def inputs_and_targets(
        self, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A staged batch as the model's input and the loss's targets (one target per output
        row once the logits are flattened to (targets, classes))."""
        ...

    # -- serving and reading a finished run (aihpc.infer, aihpc.verify, aihpc.report) -------
    def decode_ops(self, arch: Arch, prompt_tokens: int, new_tokens: int) -> tuple[float, float]:
        """Operations of answering one query by generation: a prefill of ``prompt_tokens``, then
        ``new_tokens`` one at a time (prefill, all decode steps); ValueError where they do not
        fit the architecture, or its task does not generate (:attr:`generates`)."""
        ...

    def arch_rows(self, arch: Mapping[str, Any]) -> list[tuple[str, str]]:
        """What a report shows of an architecture (its ``to_dict()``, read leniently: a field
        missing shows as not available): (label, value) rows, its summary first, then each field
        the summary does not show (:func:`other_fields`)."""
        ...


_Own = TypeVar("_Own")


def own(value: object, kind: type[_Own], what: str) -> _Own:
    """``value`` as a task's own ``kind`` (its settings, its architectures), which ``what`` names
    ("the image task's settings"); a TypeError where it is another task's."""
    if not isinstance(value, kind):
        raise TypeError(f"{what} are {kind.__name__}, got {type(value).__name__}")
    return value
