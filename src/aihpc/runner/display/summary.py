"""The short summary printed at the end of a run, from the record of its results.json."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from aihpc.base.fmt import format_si
from aihpc.launch.memory import MEMORY_KILL
from aihpc.records.codec import UNSET, value_or_none
from aihpc.records.energy import EnergyRecord, energy_text
from aihpc.records.rows import LostEpoch, TrialEnd
from aihpc.records.run_data import ImageDataRecord, LanguageDataRecord
from aihpc.results.model import RunHead
from aihpc.results.read import results_file
from aihpc.results.sections import StagingRecord

LISTED = 8  # workers, lost workers and metered devices listed one a line; past it, a summary
# beside the score and its share of peak where they would not repeat (the peak's warning says why)
UNREPEATABLE = "  (not repeatable: the machine's peak moved during the run)"


def summary_lines(results: RunHead[Any], trials: int, run_dir: Path) -> list[str]:
    """The summary of the run in ``run_dir`` whose results.json holds ``results`` and
    ``trials`` trials."""
    s, tallies = results.score.score(), results.score
    mark = UNREPEATABLE if value_or_none(tallies.not_repeatable) else ""
    lines = [
        "",
        f"aihpc run {results.run_id}: {'VALID' if s.valid else 'INVALID'}"
        + (f" ({s.invalid_reason})" if s.invalid_reason else ""),
        f"  score            {format_si(s.ops_per_second, 'OPS')}{mark}",
        f"  regulated score  {format_si(s.regulated_score, 'OPS')}{mark}",
        *(val_loss_lines(results) if s.is_loss else accuracy_lines(results)),
        *search_lines(results),
        f"  operations       {format_si(s.ops)} in {s.wall_seconds:.1f} s",
        *rate_lines(results),
    ]
    lines += peak_lines(results)
    lines += staging_lines(results.staging or None)
    lines += energy_lines(results.energy or None)
    lines.append(
        f"  trials           {tallies.trials_completed} completed, {tallies.trials_failed} failed, "
        f"{tallies.trials_diverged} diverged, {trials} in all"
    )
    lines += memory_lines(results)
    lines += loss_lines(results)
    lines += restart_lines(results)
    if results.screenings:
        share = (tallies.screening_ops or 0) / s.ops if s.ops else 0.0
        lines.append(
            f"  screening        {len(results.screenings)} proxy screenings of "
            f"{len(results.screenings[0].candidates)} "
            f"candidates, {100 * share:.1f} % of the operations"
        )
    lines += worker_lines(results)
    lines.append(f"  results          {results_file(run_dir)}")
    lines.append(f"  report           aihpc report {run_dir}")
    return lines


def accuracy_lines(results: RunHead[Any]) -> list[str]:
    """An image run's quality: its error and best accuracy, and the task's ceiling where known."""
    s, best = results.score, results.score.best_accuracy
    error = "-" if s.error_percent is None else f"{s.error_percent:.2f}"
    lines = [
        f"  error            {error} %"
        + (f"  (best accuracy {100 * best:.2f} %)" if best is not None else "")
    ]
    data = results.data
    ceiling = data.ceiling if isinstance(data, ImageDataRecord) else None
    if ceiling is not None:
        lines.append(
            f"  task ceiling     between {100 * ceiling['oracle_accuracy']:.1f} % and 100 % "
            "(a classifier that knows how the data were made)"
        )
    return lines


# how the seed-only trial of a run's search gain ended (aihpc.records.rows.TrialEnd), in words
SEED_ENDS = {
    TrialEnd.BUDGET: "at its epoch budget",
    TrialEnd.PLATEAU: "at its plateau",
    TrialEnd.PATIENCE: "no longer improving",
    TrialEnd.DEADLINE: "at the deadline",
    TrialEnd.HALVING: "stopped by successive halving",
    TrialEnd.DIVERGED: "diverged",
    TrialEnd.FAILED: "failed",
    TrialEnd.RUNNING: "still running",
}
SEARCH_GAIN = "  search gain      "
PARTS = "  score's parts    "
INDENT = " " * len(SEARCH_GAIN)


def search_lines(results: RunHead[Any]) -> list[str]:
    """How far the search got above the best seed-only trial of the run (a trial without a
    parent: the seed network trained afresh) that trained out, in the task's quality
    (:mod:`aihpc.results.gain`); where none trained out, that the gain is not measured and how
    the best of them ended; nothing in older files, or where no such trial finished an
    evaluation."""
    tallies, loss = results.score, results.score.score().is_loss
    best, gain = value_or_none(tallies.seed_only_best), value_or_none(tallies.search_gain)
    trial, end = value_or_none(tallies.seed_only_trial), value_or_none(tallies.seed_only_end)
    if trial is None or best is None or (gain is None and end is None):
        return []
    seed = f"{best:.4f} nats/token" if loss else f"{100 * best:.2f} %"
    seed_epochs = value_or_none(tallies.seed_only_epochs)
    if seed_epochs is not None:
        seed += f" after {_epochs(seed_epochs)}"
    if end is not None:
        seed += f", {SEED_ENDS[TrialEnd(end)]}"
    if gain is None:
        return [
            f"{SEARCH_GAIN}not measured: no seed-only trial trained to its end",
            f"{INDENT}(trial {trial}: {seed})",
        ]
    if loss:  # a gain is a lower loss
        by = f"{abs(gain):.4f} nats/token {'below' if gain >= 0 else 'above'}"
    else:
        by = f"{100 * abs(gain):.2f} points {'above' if gain >= 0 else 'below'}"
    first = f"{SEARCH_GAIN}{by} the best seed-only trial"
    lineage_epochs = value_or_none(tallies.best_lineage_epochs)
    if lineage_epochs is None:
        return [first, f"{INDENT}(trial {trial}: {seed})"]
    return [
        first,
        f"{INDENT}(trial {trial}: {seed};",
        f"{INDENT}the best after {_epochs(lineage_epochs)} along its lineage)",
    ]


def rate_lines(results: RunHead[Any]) -> list[str]:
    """What the score is made of (:mod:`aihpc.results.rates`): the trials at work on average,
    the seed network's rate, and the rate of the networks searched over it; nothing in older
    files."""
    tallies, wall = results.score, results.score.wall_seconds
    if tallies.work_seconds is UNSET:
        return []
    rate, path = value_or_none(tallies.seed_rate), value_or_none(tallies.path_factor)
    if rate is None or path is None or not wall:
        return [f"{PARTS}not known: the seed network's trial did no timed work"]
    return [
        f"{PARTS}{tallies.work_seconds / wall:.2f} trials at work "
        f"× {format_si(rate, 'OPS')}, the seed network's rate",
        f"{' ' * len(PARTS)}× {path:.2f}, the rate of the networks searched over the seed's",
    ]


def _epochs(count: int) -> str:
    return f"{count} epoch" if count == 1 else f"{count} epochs"


def val_loss_lines(results: RunHead[Any]) -> list[str]:
    """A language model run's quality: its best validation loss, beside the floor and the losses
    of a context-free and a one-token model."""
    s = results.score.score()
    best = "-" if s.best_val_loss is None else f"{s.best_val_loss:.4f} nats/token"
    if s.bits_per_byte is not None:
        best += f" ({s.bits_per_byte:.3f} bits per byte)"
    bound = "-" if s.max_val_loss is None else f"{s.max_val_loss:.4f}"
    lines = [f"  best val loss    {best} (valid at most {bound})"]
    if s.loss_floor is not None:
        gap = "" if s.gap_to_floor is None else f"; {s.gap_to_floor:.4f} above it"
        lines.append(
            f"  loss floor       {s.loss_floor:.4f} nats/token (the true model of the synthetic "
            f"language{gap})"
        )
    data = results.data
    bigram = data.bigram_loss if isinstance(data, LanguageDataRecord) else None
    unigram = "-" if s.unigram_loss is None else f"{s.unigram_loss:.4f}"
    lines.append(
        f"  reference        unigram {unigram}"
        + (f", bigram {bigram:.4f}" if bigram is not None else "")
        + " nats/token (counted on the training split)"
    )
    return lines


def peak_lines(results: RunHead[Any]) -> list[str]:
    """The score's share of the measured peak and of the nominal one, and the peak's warnings:
    a share above 100 %, a measured peak above the nominal one, a drift over the run."""
    s, peak = results.score.score(), results.peak
    lines = []
    if s.peak_fraction is not None and s.peak_flops_per_s is not None:
        kernels = f"{', '.join(peak.kernels)}; " if peak is not None and peak.kernels else ""
        workers = peak.workers if peak is not None else None
        lines.append(
            f"  share of peak    {100 * s.peak_fraction:.1f} % of the measured "
            f"{format_si(s.peak_flops_per_s, 'FLOP/s')} ({kernels}{workers} workers at once)"
            + (UNREPEATABLE if value_or_none(results.score.not_repeatable) else "")
        )
    nominal = value_or_none(peak.nominal) if peak is not None else None
    if s.nominal_peak_fraction is not None and s.nominal_peak_flops_per_s is not None:
        lines.append(
            f"                   {100 * s.nominal_peak_fraction:.1f} % of the nominal "
            f"{format_si(s.nominal_peak_flops_per_s, 'FLOP/s')}"
            + (f" ({nominal.derivation})" if nominal is not None and nominal.derivation else "")
        )
        if nominal is not None and nominal.note:
            lines.append(f"                   (nominal: {nominal.note})")
    elif nominal is not None and nominal.flops_per_s is None:
        lines.append(f"                   nominal peak not known: {nominal.note}")
    warnings = [
        s.peak_warning,
        value_or_none(peak.above_nominal) if peak is not None else None,
        value_or_none(peak.drift_warning) if peak is not None else None,
    ]
    lines += [f"  warning          {w}" for w in warnings if w]
    return lines


def worker_lines(results: RunHead[Any]) -> list[str]:
    """How busy each worker was; past ``LISTED`` workers, the spread in one line (each worker's
    figures are in results.json)."""
    workers = results.workers
    if len(workers) <= LISTED:
        return [
            f"  worker {w.name:<10} busy {100 * w.busy_fraction:.1f} %  ({w.epochs} epochs)"
            for w in workers
        ]
    least = min(workers, key=lambda w: w.busy_fraction)
    most = max(workers, key=lambda w: w.busy_fraction)
    middle = statistics.median(w.busy_fraction for w in workers)
    epochs = [w.epochs or 0 for w in workers]
    return [
        f"  workers          {len(workers)}: busy {100 * middle:.1f} % (median), from "
        f"{100 * least.busy_fraction:.1f} % ({least.name}) to "
        f"{100 * most.busy_fraction:.1f} % ({most.name}); "
        f"{min(epochs)} to {max(epochs)} epochs each"
    ]


def loss_lines(results: RunHead[Any]) -> list[str]:
    """The epochs lost with their workers: how many were sent again, then each worker that was
    lost, by its host, when, and the epochs it took with it, and why where its nanny killed it for
    memory (nothing where none was lost)."""
    if not results.losses:
        return []
    sent = sum(loss.requeued for loss in results.losses)
    lines = [
        f"  lost epochs      {len(results.losses)} lost with their workers, {sent} sent again"
        + (
            f", {len(results.losses) - sent} ended their trials"
            if sent < len(results.losses)
            else ""
        )
    ]
    hosts = results.worker_hosts()
    by_worker: dict[str | None, list[LostEpoch]] = {}
    for loss in results.losses:
        by_worker.setdefault(loss.worker, []).append(loss)
    for worker, losses in list(by_worker.items())[:LISTED]:
        where = hosts.get(worker or "") or losses[0].address or "an unknown host"
        epochs = ", ".join(f"trial {loss.trial_id} epoch {loss.epoch}" for loss in losses)
        why = losses[-1].reason
        lines.append(
            f"  worker lost      {worker or 'unnamed'} on {where} at {losses[0].t:.1f} s: {epochs}"
            + (f" ({why})" if why.startswith(MEMORY_KILL) else "")
        )
    if len(by_worker) > LISTED:
        lines.append(
            f"  worker lost      and {len(by_worker) - LISTED} more (results.json's losses)"
        )
    return lines


def memory_lines(results: RunHead[Any]) -> list[str]:
    """Each worker's memory limit and what it held before its first trial, in one line (nothing
    for older runs)."""
    workers = results.worker_memory.workers if results.worker_memory else ()
    if not workers:
        return []
    limits = sorted(w.limit_bytes for w in workers if w.limit_bytes)
    if not limits:
        limit = "no memory limit"
    elif limits[0] == limits[-1]:
        limit = f"a limit of {_gib(limits[0])} each"
    else:
        limit = f"limits of {_gib(limits[0])} to {_gib(limits[-1])}"
    held = sorted(w.rss_bytes for w in workers)
    node = max(w.node_bytes or 0 for w in workers)
    return [
        f"  worker memory    {len(workers)} workers, {limit} (nodes of {_gib(node)}); "
        f"{_gib(held[len(held) // 2])} held before a trial (median)"
    ]


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def restart_lines(results: RunHead[Any]) -> list[str]:
    """Each hyperparameter search process that died and was started again (none where none
    died)."""
    return [
        f"  helper restarted hyperparameter search process {r.stream} (pid {r.pid}) {r.how} at "
        f"{r.t:.1f} s; a new one was told {r.history} finished trials and the run went on"
        for r in results.helper_restarts or ()
    ]


def staging_lines(staging: StagingRecord | None) -> list[str]:
    """How long the workers took to stage the data, how much, and to which tiers (none for older
    runs)."""
    if not staging:
        return []
    tiers = f" ({', '.join(staging.tiers)})" if staging.tiers else ""
    return [
        f"  data staging     {staging.seconds:.1f} s before the clock, "
        f"{format_si(staging.bytes, 'B')} on {staging.workers} workers{tiers}"
    ]


def energy_lines(energy: EnergyRecord | None) -> list[str]:
    """The run's energy in one line (or why it was not measured), then each device measured."""
    lines = [f"  energy           {energy_text(energy)}"]
    if energy is None:
        return lines
    lines += [f"                   ({note})" for note in energy.notes or ()]
    if len(energy.devices) > LISTED:
        return [
            *lines,
            f"    {len(energy.devices)} devices measured (each in results.json's energy)",
        ]
    for d in energy.devices:
        if d.joules is not None:
            lines.append(
                f"    {d.host} {d.device:<16} {format_si(d.joules, 'J')}, "
                f"{format_si(d.watts, 'W')} ({d.source}, {d.samples} samples)"
            )
    return lines
