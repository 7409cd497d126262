"""The run summary's energy lines (one line for the run, then each device measured) and its lines
for the epochs lost with their workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aihpc.records.codec import convert
from aihpc.records.energy import EnergyRecord, energy_results
from aihpc.records.run_data import ImageDataRecord
from aihpc.results.model import RunHead
from aihpc.runner.display.summary import energy_lines, loss_lines, search_lines, summary_lines
from fixture_run import results_head

BLOCK = {
    "complete": True,
    "reason": None,
    "interval_s": 0.5,
    "devices": [
        {
            "device": "package-0",
            "host": "node1",
            "source": "rapl",
            "joules": 4500.0,
            "seconds": 30.0,
            "watts": 150.0,
            "samples": 61,
            "max_interval_s": 0.5,
            "wraps": 0,
            "resets": 0,
            "reason": None,
        },
        {
            "device": "package-0/dram",
            "host": "node1",
            "source": "rapl",
            "joules": 300.0,
            "seconds": 30.0,
            "watts": 10.0,
            "samples": 61,
            "max_interval_s": 0.5,
            "wraps": 0,
            "resets": 0,
            "reason": None,
        },
    ],
}


def test_measured_energy_gives_joules_watts_and_gops_per_watt() -> None:
    # 9.6e12 operations over 4.8 kJ: 2e9 operations per joule = 2 GOPS/W
    energy = convert(energy_results(BLOCK, ops=9.6e12), EnergyRecord, "energy")
    assert energy_lines(energy) == [
        "  energy           4.80 kJ, 160 W average (rapl), 2 GOPS/W",
        "    node1 package-0        4.50 kJ, 150 W (rapl, 61 samples)",
        "    node1 package-0/dram   300 J, 10.0 W (rapl, 61 samples)",
    ]


def test_summary_of_older_results_says_energy_was_not_measured() -> None:
    results = {
        "run_id": "r",
        "score": {
            "valid": True,
            "invalid_reason": None,
            "ops_per_second": 1e9,
            "regulated_score": 1e9,
            "error_percent": 10.0,
            "best_accuracy": 0.9,
            "ops": 10**10,
            "wall_seconds": 10.0,
            "trials_completed": 1,
            "trials_failed": 0,
            "trials_diverged": 0,
            "min_accuracy": 0.5,
            "peak_flops_per_s": None,
            "peak_fraction": None,
        },
        "trials": [],
        "workers": [],
        "schema_version": 2,
    }
    lines = summary_lines(results_head(results), 0, Path("run"))
    assert [line for line in lines if "energy" in line] == [
        "  energy           not measured: this run's aihpc did not measure energy"
    ]


def _loss(
    t: float, trial: int, worker: str | None, address: str | None, requeued: bool = True
) -> dict:
    return {
        "t": t,
        "trial_id": trial,
        "epoch": 2,
        "attempt": 1,
        "worker": worker,
        "address": address,
        "reason": "KilledWorker: ...",
        "requeued": requeued,
    }


def test_lost_workers_are_named_by_their_host_with_the_epochs_they_took() -> None:
    results = {
        "run_id": "r",
        "schema_version": 2,
        "trials": [],
        "workers": [],
        "score": {
            "valid": True,
            "invalid_reason": None,
            "ops_per_second": 1e9,
            "regulated_score": 1e9,
            "error_percent": 10.0,
            "best_accuracy": 0.9,
            "ops": 10**10,
            "wall_seconds": 10.0,
            "trials_completed": 1,
            "trials_failed": 0,
            "trials_diverged": 0,
            "min_accuracy": 0.5,
            "peak_flops_per_s": None,
            "peak_fraction": None,
        },
        "devices": {
            "rule": "one device per worker",
            "workers": [
                {"worker": w, "host": h, "slot": i, "visible": None, "devices": []}
                for i, (w, h) in enumerate([("slurm-0", "aihpc-n1"), ("slurm-1", "aihpc-n2")])
            ],
        },
        "losses": [
            _loss(41.25, 3, "slurm-1", "10.217.0.12"),
            _loss(41.3, 4, "slurm-1", "10.217.0.12"),
            _loss(70.0, 5, "w9", "10.0.0.9", requeued=False),
            _loss(80.0, 6, None, None),
        ],
    }
    record = results_head(results)
    assert loss_lines(record) == [
        "  lost epochs      4 lost with their workers, 3 sent again, 1 ended their trials",
        "  worker lost      slurm-1 on aihpc-n2 at 41.2 s: trial 3 epoch 2, trial 4 epoch 2",
        # w9 is not in devices: named by its address
        "  worker lost      w9 on 10.0.0.9 at 70.0 s: trial 5 epoch 2",
        "  worker lost      unnamed on an unknown host at 80.0 s: trial 6 epoch 2",
    ]
    assert loss_lines(results_head({**results, "losses": []})) == []
    assert loss_lines(results_head({k: v for k, v in results.items() if k != "losses"})) == []


def test_thousands_of_workers_are_summed_up_in_one_line() -> None:
    from aihpc.runner.display.summary import worker_lines

    base = {
        "run_id": "r",
        "schema_version": 3,
        "trials": [],
        "score": {
            "valid": True,
            "invalid_reason": None,
            "ops_per_second": 1e9,
            "regulated_score": 1e9,
            "error_percent": 10.0,
            "best_accuracy": 0.9,
            "ops": 10**10,
            "wall_seconds": 100.0,
            "trials_completed": 1,
            "trials_failed": 0,
            "trials_diverged": 0,
            "min_accuracy": 0.5,
            "peak_flops_per_s": None,
            "peak_fraction": None,
        },
    }
    few = [
        {"name": f"w{i}", "busy_seconds": 90.0, "busy_fraction": 0.9, "epochs": 9} for i in range(2)
    ]
    assert worker_lines(results_head({**base, "workers": few})) == [
        "  worker w0         busy 90.0 %  (9 epochs)",
        "  worker w1         busy 90.0 %  (9 epochs)",
    ]
    many = [
        {
            "name": f"w{i}",
            "busy_seconds": 50.0 + i % 41,
            "busy_fraction": (50.0 + i % 41) / 100,
            "epochs": 300 + i % 7,
        }
        for i in range(4096)
    ]
    assert worker_lines(results_head({**base, "workers": many})) == [
        "  workers          4096: busy 70.0 % (median), from 50.0 % (w0) to 90.0 % (w40); "
        "300 to 306 epochs each"
    ]
    lines = loss_lines(
        results_head(
            {
                **base,
                "workers": [],
                "losses": [_loss(float(i), i, f"w{i}", None) for i in range(20)],
            }
        )
    )
    assert (
        len(lines) == 1 + 8 + 1
        and lines[-1] == "  worker lost      and 12 more (results.json's losses)"
    )


def _peak_results(ops_per_second: float, nominal: dict | None) -> dict:
    """A run whose two workers' peaks are 100 GFLOP/s each (a convolution won the search on both),
    with ``nominal`` the nominal peak each worker's device reported."""
    from aihpc.scoring.accuracy import Accuracy
    from aihpc.scoring.peak import PeakResult, RunPeak, WorkerPeak
    from aihpc.scoring.score import compute_score

    def part() -> dict:
        return {
            "device": "cpu",
            "dtype": "float32",
            "kernel": "conv3x3 128ch 8x8 batch 32",
            "flops_per_s": 100e9,
            "min_flops_per_s": 100e9,
            "max_flops_per_s": 100e9,
            "spread": 0.0,
            "repeats": [100e9],
            "calls_per_repeat": 3,
            "flops_per_call": 10**9,
            "threads": 1,
            "note": None,
            "warning": None,
            "candidates": [{"kernel": "matmul 1024x1024", "flops_per_s": 45e9}],
            "nominal": nominal,
        }

    peak = RunPeak.of([WorkerPeak.of(f"w{i}", [PeakResult.from_dict(part())]) for i in range(2)], 1)
    total = peak.nominal.flops_per_s if peak.nominal is not None else None
    score = compute_score(
        ops=int(ops_per_second * 10),
        wall_seconds=10.0,
        best=0.9,
        quality=Accuracy(100, 0.5),
        peak_flops_per_s=peak.total_flops_per_s,
        nominal_peak_flops_per_s=total,
    )
    tallies = {"trials_completed": 1, "trials_failed": 0, "trials_diverged": 0}
    return {
        "run_id": "r",
        "schema_version": 3,
        "trials": [],
        "workers": [],
        "peak": peak.to_dict(),
        "score": {**score.to_dict(), **tallies},
    }


def test_the_share_of_the_measured_and_the_nominal_peak() -> None:
    from aihpc.runner.display.summary import peak_lines

    nominal = {
        "dtype": "float32",
        "flops_per_s": 250e9,
        "derivation": "1 cores x 16 float32 lanes x 2 FMA units x 2 FLOP x 3.9 GHz",
        "note": None,
    }
    assert peak_lines(results_head(_peak_results(80e9, nominal))) == [
        "  share of peak    40.0 % of the measured 200 GFLOP/s "
        "(conv3x3 128ch 8x8 batch 32; 2 workers at once)",
        "                   16.0 % of the nominal 500 GFLOP/s "
        "(2 x (1 cores x 16 float32 lanes x 2 FMA units x 2 "
        "FLOP x 3.9 GHz))",
    ]
    unknown = {
        "dtype": "float32",
        "flops_per_s": None,
        "derivation": None,
        "note": "the processor reports no clock",
    }
    assert peak_lines(results_head(_peak_results(80e9, unknown)))[1:] == [
        "                   nominal peak not known: the processor reports no clock"
    ]


def test_a_share_above_100_percent_and_a_peak_above_the_nominal_are_flagged() -> None:
    from aihpc.runner.display.summary import peak_lines, summary_lines

    small = {
        "dtype": "float32",
        "flops_per_s": 50e9,
        "derivation": "by hand",
        "note": "the hypervisor hides the clock",
    }
    results = _peak_results(230e9, small)
    assert results["score"]["peak_warning"] and results["peak"]["above_nominal"]
    lines = peak_lines(results_head(results))
    assert lines[0].startswith("  share of peak    115.0 % of the measured 200 GFLOP/s")
    assert lines[2] == "                   (nominal: the hypervisor hides the clock)"
    lines = lines[:2] + lines[3:]
    assert lines[2] == (
        "  warning          the score is 115.0 % of the measured peak: the run did more than the "
        "peak measured, so that peak is unreliable (a faster kernel than any measured, or a "
        "machine slowed while it was measured)"
    )
    assert lines[3].startswith(
        "  warning          the measured peak is 2.00 times the nominal peak (the "
        "hypervisor hides the clock)"
    )
    assert lines[2] in summary_lines(results_head(results), 0, Path("run"))


def _scored(**fields: Any) -> RunHead[ImageDataRecord]:
    score = {
        "valid": True,
        "invalid_reason": None,
        "ops_per_second": 1e9,
        "regulated_score": 1e9,
        "error_percent": 10.0,
        "best_accuracy": 0.9,
        "ops": 10**10,
        "wall_seconds": 10.0,
        "trials_completed": 1,
        "trials_failed": 0,
        "trials_diverged": 0,
        "min_accuracy": 0.5,
        "peak_flops_per_s": None,
        "peak_fraction": None,
        **fields,
    }
    return results_head(
        {"run_id": "r", "score": score, "trials": [], "workers": [], "schema_version": 3}
    )


def test_the_search_gain_over_the_best_seed_only_trial_in_the_tasks_quality() -> None:
    gained = _scored(seed_only_best=0.8612, seed_only_trial=4, search_gain=0.9 - 0.8612)
    assert search_lines(gained) == [
        "  search gain      3.88 points above the best seed-only trial",
        "                   (trial 4: 86.12 %)",
    ]
    assert search_lines(gained)[0] in summary_lines(gained, 0, Path("run"))
    lost = _scored(seed_only_best=0.92, seed_only_trial=0, search_gain=-0.02)
    assert search_lines(lost)[0] == "  search gain      2.00 points below the best seed-only trial"
    loss = _scored(
        best_accuracy=None,
        error_percent=None,
        min_accuracy=None,
        best_val_loss=2.2310,
        max_val_loss=2.48,
        unigram_loss=4.28,
        loss_floor=2.13,
        gap_to_floor=0.101,
        bits_per_byte=None,
        seed_only_best=2.2431,
        seed_only_trial=0,
        search_gain=2.2431 - 2.2310,
    )
    assert search_lines(loss) == [
        "  search gain      0.0121 nats/token below the best seed-only trial",
        "                   (trial 0: 2.2431 nats/token)",
    ]
    # with the training behind each side and how the seed-only trial ended, where results.json
    # has them
    explained = _scored(
        seed_only_best=0.8461,
        seed_only_trial=0,
        search_gain=0.9421 - 0.8461,
        seed_only_end="plateau",
        seed_only_epochs=10,
        best_lineage_epochs=83,
    )
    assert search_lines(explained) == [
        "  search gain      9.60 points above the best seed-only trial",
        "                   (trial 0: 84.61 % after 10 epochs, at its plateau;",
        "                   the best after 83 epochs along its lineage)",
    ]
    # a seed-only trial stopped beside its peers before it trained out: no gain, and why
    halved = _scored(
        seed_only_best=0.27,
        seed_only_trial=0,
        search_gain=None,
        seed_only_end="successive halving",
        seed_only_epochs=1,
        best_lineage_epochs=83,
    )
    assert search_lines(halved) == [
        "  search gain      not measured: no seed-only trial trained to its end",
        "                   (trial 0: 27.00 % after 1 epoch, stopped by successive halving)",
    ]
    assert search_lines(halved)[0] in summary_lines(halved, 0, Path("run"))
    # none where the file is older, or no seed-only trial finished an evaluation
    assert search_lines(_scored()) == []
    assert search_lines(_scored(seed_only_best=None, seed_only_trial=None, search_gain=None)) == []
