"""results.json's ``score``, as a record: the section a task's report quality reads
(:meth:`aihpc.tasks.quality.ReportQuality.headline`), so it lives below the tasks."""

from __future__ import annotations

from aihpc.records.codec import UNSET, Record, UnsetType, value_or_none
from aihpc.scoring.score import Score


class ScoreRecord(Record, frozen=True):
    """results.json's ``score``: the score (:class:`aihpc.scoring.score.Score`), how the trials
    ended, and how far the search got above the seed network trained afresh."""

    ops: int
    wall_seconds: float
    ops_per_second: float
    best_accuracy: float | None
    error_percent: float | None
    regulated_score: float
    min_accuracy: float | None
    valid: bool
    invalid_reason: str | None
    peak_flops_per_s: float | None
    peak_fraction: float | None
    trials_completed: int
    trials_failed: int
    trials_diverged: int
    # added after the first files
    nominal_peak_flops_per_s: float | None | UnsetType = UNSET
    nominal_peak_fraction: float | None | UnsetType = UNSET
    peak_warning: str | None | UnsetType = UNSET
    # a language model's quality (aihpc.scoring.quality.Loss): in its score only
    best_val_loss: float | None | UnsetType = UNSET
    max_val_loss: float | None | UnsetType = UNSET
    loss_floor: float | None | UnsetType = UNSET
    unigram_loss: float | None | UnsetType = UNSET
    gap_to_floor: float | None | UnsetType = UNSET
    bits_per_byte: float | None | UnsetType = UNSET
    # the operations of the proxy screenings (part of ops); absent before screening
    screening_ops: int | None = None
    # aihpc.results.gain.seed_only; absent in older files
    seed_only_best: float | None | UnsetType = UNSET
    seed_only_trial: int | None | UnsetType = UNSET
    # how that trial ended (aihpc.records.rows.TrialEnd); search_gain is null where it did not
    # train out (aihpc.records.rows.TRAINED_OUT); absent in older files
    seed_only_end: str | None | UnsetType = UNSET
    search_gain: float | None | UnsetType = UNSET
    # the epochs behind that comparison: the seed-only trial's when it reached its best, and those
    # along the lineage of the trial that reached the run's best (its ancestors' and its own)
    seed_only_epochs: int | None | UnsetType = UNSET
    best_lineage_epochs: int | None | UnsetType = UNSET
    # what the score is made of (aihpc.results.rates.rate_split): the seconds of the trials' work,
    # the seed network's operations per second of work, the rate of all the work over the seed
    # network's; absent in older files
    work_seconds: float | UnsetType = UNSET
    seed_rate: float | None | UnsetType = UNSET
    path_factor: float | None | UnsetType = UNSET
    # why the score and its share of peak would not repeat (the peak moved during the run:
    # aihpc.scoring.peak.RunPeak.not_repeatable); None where they would; absent in older files
    not_repeatable: str | None | UnsetType = UNSET

    def best(self, best_key: str) -> float | None:
        """The run's best value of its quality, whose field is ``best_key`` (the task's
        :attr:`~aihpc.tasks.quality.ReportQuality.best_key`); None where none was measured."""
        return value_or_none(getattr(self, best_key))

    def score(self) -> Score:
        """The score itself (less the tallies), as :mod:`aihpc.scoring.score` computes with it."""
        return Score.from_dict(
            {k: v for k, v in self.to_dict().items() if k in Score.__dataclass_fields__}
        )
