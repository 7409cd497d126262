"""The JSON lines between a worker and the ranks of its pool (:mod:`aihpc.train.ranks`).

The worker writes one request per line to every rank's standard input; each
rank answers with one line on its standard output.  Nothing is pickled: a
task, a result and a data set's reference travel as their dataclasses'
fields (``dataclasses.asdict``), the run's task as its class's path
(:func:`aihpc.tasks.task_path`), the weights as files.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from aihpc.records.messages import DataRef, EpochTask, Morph, WeightsRef
from aihpc.records.trial import Hyperparameters
from aihpc.train.staging import StagingRecord


class EpochRequest(TypedDict):
    """Train one epoch (every rank its share; rank 0 answers with the result)."""

    op: Literal["epoch"]
    kind: str  # the run's task, aihpc.tasks.task_path's
    task: dict[str, Any]  # the EpochTask's fields
    worker: str
    t_start: float


class PeakRequest(TypedDict):
    """Measure the device's peak, every rank at the same moment."""

    op: Literal["peak"]
    threads: int | None
    seconds: float
    kinds: list[str]


class StageRequest(TypedDict):
    """Stage the data set (kept for the rank's epochs)."""

    op: Literal["stage"]
    kind: str  # the run's task, aihpc.tasks.task_path's
    data: dict[str, Any]  # the DataRef's fields


RankRequest = EpochRequest | PeakRequest | StageRequest


class RankAnswer(TypedDict, total=False):
    """A rank's answer: what its request asked for (``result``, ``peak`` or ``staged``) and the
    rank's own state (``pid``, ``served``, ``data_loads``), or the ``error`` it failed with."""

    result: dict[str, Any]  # the EpochResult's fields (rank 0's epoch answer)
    peak: dict[str, Any]  # aihpc.scoring.peak.PeakResult.to_dict()
    staged: StagingRecord
    pid: int
    served: int  # requests served so far
    data_loads: int  # data sets staged so far (aihpc.train.staging.loads)
    error: str  # the exception's type and first line
    traceback: str


# -- the task as JSON (the weights are files) ----------------------------------------------
def epoch_task(fields: dict[str, Any]) -> EpochTask:
    """The :class:`EpochTask` of its fields as an :class:`EpochRequest` carries them."""
    fields = dict(fields)
    fields["data"] = DataRef.from_dict(fields["data"])
    fields["hparams"] = Hyperparameters.from_dict(fields["hparams"])
    fields["start"] = weights_ref(fields["start"])
    if fields["morph"] is not None:
        fields["morph"] = Morph(
            **{**fields["morph"], "parent_weights": weights_ref(fields["morph"]["parent_weights"])}
        )
    return EpochTask(**fields)


def weights_ref(fields: dict[str, str] | None) -> WeightsRef | None:
    """The :class:`WeightsRef` of its fields (None for none)."""
    return WeightsRef(**fields) if fields is not None else None
