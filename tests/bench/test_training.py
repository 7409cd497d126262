"""Level 2, ``aihpc bench training``: time to a target accuracy on real data (the digits).

Every run here uses one CPU thread: the curve is then the same on any
machine load, and a 2-core machine shared with other tests stays fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise

import pytest

from aihpc.base.errors import ConfigError
from aihpc.bench.training import TrainingConfig, check_fit, format_table, time_to_target
from aihpc.cli import main

DIGITS_TRAIN = 1438  # 1797 digits less the 20 % validation split of seed 0


@pytest.mark.slow
def test_digits_cnn_reaches_a_modest_target_and_says_so() -> None:
    outcome = time_to_target(
        TrainingConfig(model="digits_cnn", target=0.8, max_epochs=10, threads=1)
    )
    curve = outcome.curve
    assert outcome.reached and outcome.stop_reason == "target reached"
    assert len(curve) <= 4  # measured: 0.83 after the first epoch
    assert curve[-1].val_accuracy >= 0.8 and all(p.val_accuracy < 0.8 for p in curve[:-1])
    seconds = [p.seconds for p in curve]
    assert seconds[0] > 0 and all(b > a for a, b in pairwise(seconds))
    assert [p.epoch for p in curve] == list(range(1, len(curve) + 1))
    assert all(
        p.samples == DIGITS_TRAIN // 64 * 64 for p in curve
    )  # the last partial batch is dropped
    assert all(p.eval_s > 0 for p in curve)
    data = outcome.to_record().to_dict()
    assert data["time_to_target_s"] == pytest.approx(seconds[-1])
    assert data["throughput_samples_per_s"] == pytest.approx(
        len(curve) * (DIGITS_TRAIN // 64 * 64) / seconds[-1]
    )
    assert data["wall_s"] >= data["train_s"] + data["eval_s"] * 0.99
    assert (data["model"], data["dataset"], data["batch"], data["seed"], data["device"]) == (
        "digits_cnn",
        "digits",
        64,
        0,
        "cpu",
    )
    assert "TARGET REACHED" in format_table(outcome).splitlines()[-2]


def test_an_out_of_reach_target_exhausts_the_budget() -> None:
    outcome = time_to_target(
        TrainingConfig(model="digits_cnn", target=0.9999, max_epochs=1, threads=1)
    )
    assert not outcome.reached
    assert outcome.stop_reason == "budget exhausted: 1 epochs"
    assert outcome.time_to_target_s is None and len(outcome.curve) == 1
    assert "TARGET NOT REACHED (budget exhausted: 1 epochs)" in format_table(outcome)


def test_the_same_seed_gives_the_same_curve() -> None:
    def accuracies(seed: int) -> list[tuple[float, float | None]]:
        config = TrainingConfig(model="digits_cnn", target=1.0, max_epochs=2, seed=seed, threads=1)
        return [(p.val_accuracy, p.train_loss) for p in time_to_target(config).curve]

    first = accuracies(3)
    assert first == accuracies(3)  # bit for bit
    assert first != accuracies(4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": 1.01}, "target must be a validation accuracy in (0, 1], got 1.01"),
        ({"target": 0.0}, "target must be a validation accuracy in (0, 1], got 0.0"),
        ({"max_epochs": 0}, "max_epochs must be an integer >= 1, got 0"),
        ({"batch": 1}, "batch must be an integer >= 2, got 1"),
        ({"minutes": 0.0}, "minutes must be > 0, got 0.0"),
        ({"lr": -0.1}, "lr must be > 0, got -0.1"),
        ({"threads": 0}, "threads must be an integer >= 1, got 0"),
    ],
)
def test_bad_configuration_is_one_config_error(change: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        TrainingConfig(**{"model": "digits_cnn", "target": 0.9, **change})
    assert str(info.value) == message


def test_a_model_that_cannot_take_the_data_is_a_config_error() -> None:
    source = "data set 'digits'"
    for fits in ("digits_cnn", "resnet20", "vgg_small", "resnet18"):
        check_fit(fits, (1, 8, 8), 10, 64, source)
    with pytest.raises(
        ConfigError, match=r"model 'vgg11' cannot take the 1x8x8 images of data set 'digits'"
    ):
        check_fit("vgg11", (1, 8, 8), 10, 64, source)
    with pytest.raises(ConfigError, match="model 'alexnet' cannot take"):
        time_to_target(TrainingConfig(model="alexnet", target=0.9, threads=1))


def test_bad_target_through_the_cli_is_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    code = main(
        ["bench", "training", "--model", "digits_cnn", "--target", "1.01", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.strip().splitlines() == [
        "aihpc bench: error: target must be a validation accuracy in (0, 1], got 1.01"
    ]


@pytest.mark.slow
def test_cli_exits_0_and_writes_the_result_when_the_target_is_missed(tmp_path) -> None:
    out = tmp_path / "training.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "bench",
            "training",
            "--model",
            "digits_cnn",
            "--target",
            "0.9999",
            "--max-epochs",
            "1",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "bench-training" and doc["schema_version"] == 1
    data = doc["data"]
    assert data["reached"] is False and data["stop_reason"] == "budget exhausted: 1 epochs"
    assert data["time_to_target_s"] is None and len(data["epochs"]) == 1
    assert set(data["epochs"][0]) == {
        "epoch",
        "seconds",
        "eval_s",
        "train_loss",
        "val_accuracy",
        "samples",
        "samples_per_s",
    }
    assert "TARGET NOT REACHED" in proc.stdout and "epoch 1:" in proc.stderr
