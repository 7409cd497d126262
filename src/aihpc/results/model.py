"""results.json as one typed record: :class:`RunResults`, its head :class:`RunHead` and trials.

The record is the file's layout (:mod:`aihpc.results.write` writes it,
:mod:`aihpc.results.read` reads it back), generic in the run's ``data``: an
image run's is ``RunResults[ImageDataRecord]``, a language model run's
``RunResults[LanguageDataRecord]`` (the record its task names,
:attr:`aihpc.tasks.base.Task.data_record`, by the configuration's ``task``).
``schema_version`` is the one the file was written with; its content is read
into the current form (the upgrades of :mod:`aihpc.results.read`).  A section a
file is too old to have is absent (UNSET or None, as its type says); ``config`` is the run's
configuration as written (:func:`aihpc.tasks.read_config` checks it into a
:class:`~aihpc.base.config.RunConfig`, by its task's options).

What computes with a run's result takes these records: the task's name
(:attr:`RunHead.task`: :func:`aihpc.tasks.recorded_task` gives the task, which says how the run
judged its models), the score as :mod:`aihpc.scoring` computes it
(:meth:`~aihpc.records.score.ScoreRecord.score`), the peak
(:meth:`~aihpc.records.peak.RunPeakRecord.run_peak`), the environment
(:meth:`~aihpc.records.environment.EnvironmentRecord.environment`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from aihpc.nas.helper_restart import HelperRestart
from aihpc.records.codec import UNSET, Record, UnsetType
from aihpc.records.energy import EnergyRecord
from aihpc.records.environment import EnvironmentRecord
from aihpc.records.peak import DtypePeakRecord, RunPeakRecord
from aihpc.records.rows import LostEpoch
from aihpc.records.run_data import ImageDataRecord, LanguageDataRecord
from aihpc.records.score import ScoreRecord
from aihpc.results.sections import (
    CompilationRecord,
    DevicesRecord,
    IntegrityRecord,
    LayoutRecord,
    ModelFlopsRecord,
    ScreeningRecord,
    SegmentRecord,
    StagingRecord,
    TimelinePoint,
    WorkerBusy,
    WorkerMemoryRecord,
)
from aihpc.results.trial import TrialRecord
from aihpc.tasks import DEFAULT_TASK

D = TypeVar("D", ImageDataRecord, LanguageDataRecord)


class RunHead(Record, Generic[D], frozen=True):
    """Every section of results.json but its trials (what ``aihpc compare`` and ``rank`` read)."""

    schema_version: int
    aihpc_version: str | None
    run_id: str | None
    config: dict[str, Any]  # base.config.RunConfig.to_dict() as the run wrote it
    environment: EnvironmentRecord
    # the run's peak; None where not measured (and in files of schema 1: peak_by_dtype)
    peak: RunPeakRecord | None
    score: ScoreRecord
    timeline: tuple[TimelinePoint, ...]
    workers: tuple[WorkerBusy, ...]
    data: D | None | UnsetType = UNSET
    layout: LayoutRecord | None | UnsetType = UNSET
    staging: StagingRecord | None | UnsetType = UNSET
    devices: DevicesRecord | None | UnsetType = UNSET  # which device(s) each worker trains on
    energy: EnergyRecord | None | UnsetType = UNSET  # None: the run did not meter
    segments: tuple[SegmentRecord, ...] | None = None
    screenings: tuple[ScreeningRecord, ...] | None = None
    losses: tuple[LostEpoch, ...] | None = None  # epochs lost with their workers
    helper_restarts: tuple[HelperRestart, ...] | None = None
    worker_memory: WorkerMemoryRecord | None | UnsetType = UNSET
    integrity: IntegrityRecord | None = None
    model_flops: ModelFlopsRecord | None = None
    compilation: CompilationRecord | None = None
    # schema 1: the peak measured in each dtype (a matmul's; no worker's, no kernel search)
    peak_by_dtype: dict[str, DtypePeakRecord] | None = None

    @property
    def task(self) -> str:
        """The run's task, as its configuration names it (``image`` for runs from before there
        were tasks)."""
        return str(self.config.get("task") or DEFAULT_TASK)

    def worker_hosts(self) -> dict[str, str]:
        """Each worker's host name, by worker name (empty for files without ``devices``)."""
        return {w.worker: w.host for w in self.devices.workers} if self.devices else {}


class RunResults(RunHead[D], Generic[D], frozen=True, kw_only=True):
    """One run's result: results.json whole (the module docstring)."""

    trials: tuple[TrialRecord, ...]

    def head(self) -> RunHead[D]:
        """Its sections but its trials."""
        values = {name: getattr(self, name) for name in RunHead.__struct_fields__}
        return RunHead(**values)
