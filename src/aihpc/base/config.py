"""Configuration of an ``aihpc run``: frozen sections, each validated when built.

A :class:`RunConfig` is four sections: the run (:class:`RunSection`: the
budget, the task and its data set, where the workers train, the run's
clocks), the search (:class:`SearchSection`: the strategy and its mechanisms,
how a trial trains), where the workers run (:class:`LaunchSection`: their
number, a batch system or a scheduler), and the task's own typed settings
(:class:`TaskOptions`, of the type the run's task gives:
:attr:`aihpc.tasks.base.Task.options_type`).

Values come from defaults, then a TOML file (``--config run.toml``), then
command-line flags, each overriding the one before.  A file may give a setting
at its top (``minutes = 10``, every file before sections did) or in its
section (``[run]``, ``[search]``, ``[launch]``, and the task's own under the
task's name, ``[image]`` or ``[lm]``); flags name settings alone.  Unknown keys
are rejected with the list of valid ones; every check names the rule and the
bad value.  :meth:`RunConfig.to_dict` writes every setting at the top, one key
each, as results.json's ``config`` has always held them.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aihpc.base.errors import ConfigError, StorageError

STRATEGIES = ("evolution", "random", "none", "seed")  # aihpc.nas.search
OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("cosine", "step")
DEVICES = ("auto", "cpu", "cuda")
STAGING = ("auto", "device", "stream")  # aihpc.train.staging's tiers
BATCH_SYSTEMS = ("slurm", "pbs", "lsf")
MAX_HPO_PROCESSES = 16  # TPE processes of the master (each near one core when the search is busy)
# candidates one screening may score (each costs about a training step of a minibatch)
MAX_SCREEN = 16
# the least memory limit a worker is given: a worker process with torch loaded, before it trains,
# with room to measure the peak (aihpc.launch.memory sizes the limits)
MIN_WORKER_MEMORY = 512 * 2**20

Section = TypeVar("Section")


@dataclass(frozen=True)
class RunSection:
    """``[run]``: the budget, the task and its data set, where the workers train, the clocks.

    Times are in minutes or seconds as named.
    """

    minutes: float = 5.0
    task: str = "image"  # what the search searches (aihpc.tasks): "image", "lm", or registered
    dataset: str = "synthetic"  # the task's own synthetic data unless another is named
    data_path: str | None = None
    seed: int = 0
    device: str = "auto"
    # where workers stage the data: "device" (whole, on it), "stream" (a local file, read
    # through a DataLoader)
    staging: str = "auto"
    # node-local folder of the "stream" tier (None: the system's temporary folder)
    stage_dir: str | None = None
    # compile each trial's model region by region (aihpc.train.regions); None: the task's default
    # for the device (Task.compile_auto)
    compile: bool | None = None
    max_attempts: int = 3
    report_seconds: float = 30.0
    # each worker's timed matmuls for the peak, before the run and after it (all at once)
    peak_seconds: float = 3.0

    def __post_init__(self) -> None:
        _check(self.minutes > 0, "minutes must be > 0", self.minutes)
        _check(
            math.isfinite(self.peak_seconds) and self.peak_seconds > 0,
            "peak_seconds must be a finite number > 0",
            self.peak_seconds,
        )
        _check(self.max_attempts >= 1, "max_attempts must be >= 1", self.max_attempts)
        _check(self.report_seconds > 0, "report_seconds must be > 0", self.report_seconds)
        _check(
            self.staging in STAGING, f"staging must be one of {', '.join(STAGING)}", self.staging
        )
        _check(self.device in DEVICES, f"device must be one of {', '.join(DEVICES)}", self.device)


@dataclass(frozen=True)
class SearchSection:
    """``[search]``: the strategy, its mechanisms, and how each trial trains."""

    strategy: str = "evolution"
    population: int = 16
    tournament: int = 4
    # processes drawing TPE suggestions side by side (benchmarks/master_capacity.py)
    hpo_processes: int = 2
    # candidate children scored by zero-cost proxies per new child, the best trained; 0: off
    screen: int = 0
    # a child's first epoch starts from its parent's optimizer state carried through the growth
    # (aihpc.nas.moments), not from a fresh optimizer
    carry_optimizer: bool = True
    # the search's mechanisms (aihpc.runner.search: each applies to the strategies that morph,
    # evolution and random; benchmarks/search_value.py ablates them one at a time):
    # the learning rate follows one schedule per lineage, from its root's start to the run's end
    lineage_schedule: bool = True
    # a child takes its parent's hyperparameters, perturbed (PBT's exploit and explore), not TPE's
    inherit_hparams: bool = True
    # a trial ends when its validation curve flattens, and a child grows towards the size that is
    # compute-optimal for the time left
    grow_on_plateau: bool = True
    # asynchronous successive halving: a trial trailing its peers at a rung of lineage epochs stops
    early_stop: bool = True
    # a new trial forks the running trial that leads the run (PBT's exploit), not a finished parent
    # that is behind it
    fork_leader: bool = True
    # with more than one worker, the run's leading trial trains on past its plateau and its epoch
    # budget, and another worker grows a child of its latest weights (aihpc.runner.search.lifecycle;
    # with grow_on_plateau and lineage_schedule only)
    keep_leader: bool = True
    epochs_min: int = 2
    # the most epochs of one trial: a drawn budget's largest (strategy none, and without
    # grow_on_plateau), and the cap of a trial that its plateau ends, as ASHA's largest rung: under
    # it, trials end at their plateau, not at a cap that makes them grow before their curve flattens
    epochs_max: int = 32
    patience: int = 2
    max_params: int | None = None  # None: sized to the device
    optimizer: str | None = None  # None: the task's (image: sgd; lm: adamw)
    schedule: str = "cosine"
    # None: sized to the device by the task (aihpc.tasks.image.task.DEFAULT_BATCH_SIZES, ...)
    batch_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self._check_strategy()
        self._check_training()

    def _check_strategy(self) -> None:
        """The strategy, its population and tournament, TPE's processes, screening."""
        _check(
            self.strategy in STRATEGIES,
            f"strategy must be one of {', '.join(STRATEGIES)}",
            self.strategy,
        )
        _check(self.population >= 2, "population must be >= 2", self.population)
        _check(
            1 <= self.tournament <= self.population,
            "tournament must be in [1, population]",
            self.tournament,
        )
        _check(
            1 <= self.hpo_processes <= MAX_HPO_PROCESSES,
            f"hpo_processes must be in [1, {MAX_HPO_PROCESSES}]",
            self.hpo_processes,
        )
        _check(
            self.screen == 0 or 2 <= self.screen <= MAX_SCREEN,
            f"screen must be 0 (off) or in [2, {MAX_SCREEN}]",
            self.screen,
        )

    def _check_training(self) -> None:
        """A trial's epochs, its networks' size, optimizer, schedule and batch sizes."""
        _check(self.epochs_min >= 1, "epochs_min must be >= 1", self.epochs_min)
        _check(
            self.epochs_max >= self.epochs_min, "epochs_max must be >= epochs_min", self.epochs_max
        )
        _check(self.patience >= 1, "patience must be >= 1", self.patience)
        _check(
            self.max_params is None or self.max_params >= 1000,
            "max_params must be >= 1000",
            self.max_params,
        )
        _check(
            self.optimizer is None or self.optimizer in OPTIMIZERS,
            f"optimizer must be one of {', '.join(OPTIMIZERS)}",
            self.optimizer,
        )
        _check(
            self.schedule in SCHEDULES,
            f"schedule must be one of {', '.join(SCHEDULES)}",
            self.schedule,
        )
        _check(
            self.batch_sizes is None
            or (len(self.batch_sizes) >= 1 and all(int(b) >= 1 for b in self.batch_sizes)),
            "batch_sizes must be a non-empty list of integers >= 1",
            list(self.batch_sizes or ()),
        )


@dataclass(frozen=True)
class LaunchSection:
    """``[launch]``: where the workers run: on this machine, as batch jobs, or at a scheduler."""

    workers: int | None = None  # None: one per GPU, or cores split on CPU
    threads_per_worker: int | None = None  # None: cores / workers
    scheduler: str | None = None  # tcp://HOST:PORT of a running Dask scheduler
    # "slurm", "pbs" or "lsf": workers as batch jobs (SLURM: or the allocation's tasks)
    batch_system: str | None = None
    nodes: int = 1  # batch: nodes to spread workers over
    gpus_per_node: int = 0  # batch: GPUs per node (0: CPU-only workers)
    partition: str | None = None  # batch: partition / queue (default: the system's default)
    walltime: str = "01:00:00"  # batch: time limit of each worker job
    # memory limit of each worker, e.g. "8GiB" (None: its node's memory less a reserve, divided
    # among the node's workers: aihpc.launch.memory)
    worker_memory: str | None = None
    tls: bool | None = None  # None: TLS whenever workers may run on other nodes (batch jobs)
    # batch: network interface scheduler and workers use, e.g. "ib0" (default: all)
    interface: str | None = None
    procs_per_trial: int = 1  # processes (GPUs on GPU) training each trial data-parallel

    def __post_init__(self) -> None:
        _check(self.workers is None or self.workers >= 1, "workers must be >= 1", self.workers)
        _check(
            self.threads_per_worker is None or self.threads_per_worker >= 1,
            "threads_per_worker must be >= 1",
            self.threads_per_worker,
        )
        _check(self.nodes >= 1, "nodes must be >= 1", self.nodes)
        _check(
            self.worker_memory is None or _size(self.worker_memory) is not None,
            "worker_memory must be a size like '4GiB'",
            self.worker_memory,
        )
        _check(
            self.worker_memory is None or (_size(self.worker_memory) or 0) >= MIN_WORKER_MEMORY,
            f"worker_memory must be at least {MIN_WORKER_MEMORY // 2**20}MiB (a worker with torch "
            "loaded, before it trains)",
            self.worker_memory,
        )
        _check(self.gpus_per_node >= 0, "gpus_per_node must be >= 0", self.gpus_per_node)
        _check(self.procs_per_trial >= 1, "procs_per_trial must be >= 1", self.procs_per_trial)
        _check(
            self.batch_system in (None, *BATCH_SYSTEMS),
            f"batch_system must be one of {', '.join(BATCH_SYSTEMS)}",
            self.batch_system,
        )
        _check(
            not (self.batch_system and self.scheduler),
            f"give batch_system ({self.batch_system}) or scheduler, not both",
            self.scheduler,
        )
        _check(
            self.scheduler is None or "://" in self.scheduler,
            "scheduler must be an address like tcp://HOST:PORT",
            self.scheduler,
        )


#: The sections every run has, by the name a TOML file gives them.
SECTIONS: dict[str, type] = {"run": RunSection, "search": SearchSection, "launch": LaunchSection}


class TaskOptions(Protocol):
    """A task's own settings (``RunConfig.options``): a frozen value of its task's type
    (:attr:`aihpc.tasks.base.Task.options_type`), made by :meth:`from_dict`, which checks them
    (:func:`read_section` reads a dataclass's)."""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Every setting's name, as a TOML file and :meth:`to_dict` write it."""
        ...

    @classmethod
    def ignored(cls) -> tuple[str, ...]:
        """Another task's settings that a flat configuration from before typed task settings
        holds (every run's held them all), which this task ignores, as it always did."""
        ...

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str) -> TaskOptions:
        """The settings of ``values`` (ConfigError naming the key and the value)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The settings, one key each, as results.json's ``config`` holds them."""
        ...

    def ref_options(self) -> dict[str, Any]:
        """What the workers load the data set with and key their copy by (``DataRef.options``)."""
        ...


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one benchmark run (the module docstring)."""

    run: RunSection
    search: SearchSection
    launch: LaunchSection
    options: TaskOptions  # the task's own, of its task's options_type

    def to_dict(self) -> dict[str, Any]:
        """Every setting at the top, one key each (results.json's ``config``)."""
        d: dict[str, Any] = {}
        for section in (self.run, self.search, self.launch):
            d.update(dataclasses.asdict(section))
        sizes = self.search.batch_sizes
        d["batch_sizes"] = list(sizes) if sizes is not None else None
        return {**d, **self.options.to_dict()}

    @classmethod
    def from_dict(
        cls, values: Mapping[str, Any], options_type: type[TaskOptions], source: str = "config"
    ) -> RunConfig:
        """Build from a mapping, flat or in sections (the module docstring), the task's own
        settings by ``options_type``; unknown keys and wrong types fail with a clear message."""
        task = task_name(values)
        parts: dict[str, dict[str, Any]] = {name: {} for name in (*SECTIONS, task)}
        unknown: list[str] = []
        for key, value in values.items():
            if key in parts:
                if not isinstance(value, Mapping):
                    raise ConfigError(f"[{key}] in {source} must be a table, got {value!r}")
                for inner, item in value.items():
                    home = _home(inner, options_type, task)
                    if home != key:
                        where = f" (it belongs in [{home}])" if home else ""
                        raise ConfigError(f"unknown key {inner} in [{key}] of {source}{where}")
                    _put(parts[key], inner, item, source)
            elif (home := _home(key, options_type, task)) is not None:
                _put(parts[home], key, value, source)
            elif key not in options_type.ignored():
                unknown.append(key)
        if unknown:
            keys = sorted({k for kind in SECTIONS.values() for k in section_keys(kind)})
            raise ConfigError(
                f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))} in "
                f"{source}; valid keys: {', '.join(sorted({*keys, *options_type.keys()}))}"
            )
        return cls(
            run=read_section(RunSection, parts["run"], source),
            search=read_section(SearchSection, parts["search"], source),
            launch=read_section(LaunchSection, parts["launch"], source),
            options=options_type.from_dict(parts[task], source),
        )

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with the settings named changed (their names as :meth:`to_dict` writes them;
        a None leaves a setting as it is)."""
        merged = self.to_dict()
        merged.update({k: v for k, v in changes.items() if v is not None})
        return RunConfig.from_dict(merged, type(self.options))


def read_section(kind: type[Section], values: Mapping[str, Any], source: str) -> Section:
    """A frozen dataclass ``kind`` (a section, a task's settings) from ``values``: unknown keys
    and values of the wrong type fail with the key and the value."""
    valid = typing.get_type_hints(kind)
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {source}; "
            f"valid keys: {', '.join(sorted(valid))}"
        )
    clean = {name: _coerce(name, valid[name], value) for name, value in values.items()}
    return kind(**clean)


def section_keys(kind: type) -> tuple[str, ...]:
    """The settings of a section or of a task's settings dataclass, in order."""
    return tuple(f.name for f in dataclasses.fields(kind))


def task_name(values: Mapping[str, Any]) -> str:
    """The task a mapping of settings names (its ``task``, at the top or in ``[run]``; else the
    default); ConfigError for a task that is not a name."""
    run = values.get("run")
    named = run.get("task") if isinstance(run, Mapping) else None
    task = named if named is not None else values.get("task", RunSection.task)
    if not isinstance(task, str):
        raise ConfigError(f"task must be of type str, got {task!r}")
    return task


def _home(key: str, options: type[TaskOptions], task: str) -> str | None:
    """The part a setting belongs to: a section's name, or the task's for its own settings;
    None for a key of neither."""
    for name, kind in SECTIONS.items():
        if key in section_keys(kind):
            return name
    return task if key in options.keys() else None


def _put(part: dict[str, Any], key: str, value: Any, source: str) -> None:
    """``key`` into its part, ConfigError where it was given already (at the top of a file and
    in its section's table)."""
    if key in part:
        raise ConfigError(
            f"{key} is given twice in {source}: give it once, at the top or in its table"
        )
    part[key] = value


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into a plain dict (not yet validated)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as exc:
        raise StorageError(f"cannot read config file {p}: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {p}: {exc}") from None


def _size(text: str) -> int | None:
    """Bytes of a size like '4GiB'; None if ``text`` is not one."""
    from dask.utils import parse_bytes

    try:
        return int(parse_bytes(text))
    except (ValueError, TypeError):
        return None


def _check(ok: bool, rule: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{rule}, got {value!r}")


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """Check a TOML/flag value against the field's type hint; ints are accepted as floats."""
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else hint
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{name} must not be empty")
    kind = typing.get_origin(base) or base
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and number and isinstance(value, int):
        return value
    if kind is float and number:
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is dict and isinstance(value, dict):
        return dict(value)
    if (
        kind is tuple
        and isinstance(value, (list, tuple))
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return tuple(value)
    raise ConfigError(f"{name} must be of type {kind.__name__}, got {value!r}")
