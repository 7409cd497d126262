"""The ``data`` of the three ``aihpc recommend`` result files, field by field: a recommendation
(``recommend``), a calibration of the matcher (``recommend-calibration``) and a validation of
it (``recommend-validation``); :mod:`aihpc.recommend` says what each figure means."""

from __future__ import annotations

from aihpc.records.codec import Record


class ComplexityRecord(Record, frozen=True):
    """The complexity measures of one task (:mod:`aihpc.recommend.complexity` says what each
    measures)."""

    f1: float
    n1: float
    n3: float
    t2: float
    probe_error: float
    num_samples: int
    sample_size: int
    num_classes: int
    dimension: int


class CandidateScoreRecord(Record, frozen=True):
    """What is known of one candidate before training: its size, training operations per sample
    and zero-cost proxies (None: the proxy failed)."""

    name: str
    source: str
    detail: str
    params: int
    ops_per_sample: float
    proxies: dict[str, float | None]


# ------------------------------------------------------------------ aihpc recommend
class RankedRecord(CandidateScoreRecord, frozen=True):
    """A ranked candidate: its predicted accuracy and 80 % interval (None outside the calibrated
    domain), its rank (1 = best) and whether it is within the budget."""

    predicted_accuracy: float | None
    interval: tuple[float, float] | None
    rank: int
    within_budget: bool


class OutsideRecord(Record, frozen=True):
    """A feature outside the calibrated range: of the task, or of a named candidate."""

    feature: str
    value: float
    low: float
    high: float
    candidate: str | None


class RecommendData(Record, frozen=True):
    """``aihpc recommend``: a task's complexity, its ranked candidates, the one recommended and
    how (``method``: "matcher", or the fallback proxy outside the domain)."""

    task: str
    complexity: ComplexityRecord
    choice: str
    method: str
    domain: str
    in_domain: bool
    outside: tuple[OutsideRecord, ...]
    margin: float
    budget_ops: float | None
    seconds: float
    candidates: tuple[RankedRecord, ...]


# ------------------------------------------------------------------ observations
class ObservedCandidateRecord(CandidateScoreRecord, frozen=True):
    """A candidate observed on a task: its scores and the accuracy each training seed reached."""

    accuracy: tuple[float, ...]


class ObservationRecord(Record, frozen=True):
    """One candidate set observed on one task (:class:`aihpc.recommend.study.Observation`)."""

    task: str
    family: str
    input_shape: tuple[int, int, int]
    candidate_set: str
    complexity: ComplexityRecord
    candidates: tuple[ObservedCandidateRecord, ...]


# ------------------------------------------------------------------ aihpc recommend calibrate
class ProvenanceRecord(Record, frozen=True):
    """How a matcher was made: the calibration's command and settings, the software, the data it
    was fitted on and its cross-validated quality per penalty; ``refit``: the command that
    fitted it again from saved observations (absent where it was not)."""

    command: str
    seed: int
    steps: int
    seeds: int
    candidate_sets: tuple[str, ...]
    aihpc_version: str
    torch_version: str
    families: tuple[str, ...]
    tasks: tuple[str, ...]
    rows: int
    cv_tau_by_within_alpha: dict[str, float]
    cv_mae_by_between_alpha: dict[str, float]
    refit: str | None = None


class MatcherRecord(Record, frozen=True):
    """A fitted matcher (:class:`aihpc.recommend.matcher.Matcher`), as its file holds it."""

    format_version: int
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    alpha: tuple[float, float]
    residuals: tuple[float, float]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    provenance: ProvenanceRecord


class CalibrationData(Record, frozen=True):
    """``aihpc recommend calibrate``: the matcher fitted and the observations it was fitted on."""

    matcher: MatcherRecord
    observations: tuple[ObservationRecord, ...]


# ------------------------------------------------------------------ aihpc recommend validate
class TaskScoreRecord(Record, frozen=True):
    """One predictor on one held-out task and candidate set: Kendall's tau against the truth and
    the regret of its pick."""

    candidate_set: str
    task: str
    family: str
    shape: str
    predictor: str
    tau: float
    regret: float


class ValidationRecord(Record, frozen=True):
    """A validation's scores, interval coverage per candidate set, the tasks ranked outside the
    domain ("set/task"), seed-to-seed tau and its settings."""

    scores: tuple[TaskScoreRecord, ...]
    coverage: dict[str, float]
    out_of_domain: tuple[str, ...]
    seed_tau: dict[str, float]
    seeds: int
    steps: int
    margin: float


class ValidationData(Record, frozen=True):
    """``aihpc recommend validate``: the judgement and the held-out observations it judged."""

    validation: ValidationRecord
    observations: tuple[ObservationRecord, ...]
