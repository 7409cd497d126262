"""The run's metadata: the store's ``meta`` table (key -> JSON value) as one typed record.

:class:`MetaKey` names every key, once; :class:`RunMeta` holds their values,
each field named as its key.  A store written by an older aihpc may lack
newer keys: each field's default is what its absence means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class MetaKey(StrEnum):
    """The keys of the store's ``meta`` table (the values are what stores hold)."""

    CONFIG = "config"
    RUN_ID = "run_id"
    STORE_FORMAT = "store_format"
    FINISHED = "finished"
    DEVICES = "devices"
    ENVIRONMENT = "environment"
    DATA = "data"
    LAYOUT = "layout"
    PEAK = "peak"
    PEAK_FLOPS_PER_S = "peak_flops_per_s"
    NOMINAL_PEAK_FLOPS_PER_S = "nominal_peak_flops_per_s"
    STAGING = "staging"
    ENERGY = "energy"
    HELPER_RESTARTS = "helper_restarts"
    WORKER_MEMORY = "worker_memory"


@dataclass(frozen=True)
class RunMeta:
    """A run's metadata as the store holds it (results.json copies most of it).

    None where a key is absent: the run never got so far, or its store is
    older than the key.
    """

    config: dict[str, Any] | None = None  # base.config.RunConfig.to_dict()
    run_id: str | None = None  # the run directory's name
    # the store's layout (records.store_sql.STORE_FORMAT); 1: a store from before it was recorded
    store_format: int = 1
    finished: bool = False  # whether results.json was written: a finished run is not resumed
    devices: dict[str, Any] | None = None  # which device(s) each worker trains on
    environment: dict[str, Any] | None = None  # machine.environment.Environment.to_dict()
    data: dict[str, Any] | None = None  # the data set, as the task inspected it
    layout: dict[str, Any] | None = None  # the workers' layout (or the scheduler's address)
    peak: dict[str, Any] | None = None  # scoring.peak.PeakResult.to_dict(), with its drift after
    peak_flops_per_s: float | None = None  # the measured peak, the score's share's denominator
    nominal_peak_flops_per_s: float | None = None  # the devices' data-sheet peak, if known
    staging: dict[str, Any] | None = None  # how the data set was staged on the workers
    energy: dict[str, Any] | None = None  # the energy block (energy.run)
    # the hyperparameter search processes restarted (nas.hpo), over every segment of the run
    helper_restarts: list[dict[str, Any]] = field(default_factory=list)
    # each worker's memory limit and what it held before its first trial (launch.memory)
    worker_memory: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunMeta:
        """The metadata of a ``meta`` table read as {key: decoded value}; keys it does not know
        are left out."""
        return cls(**{key: value for key, value in values.items() if key in _KEYS})


_KEYS = frozenset(MetaKey)
