"""``aihpc profile``: phases, operator types, the memory breakdown, sweeps and the command line.

Timings on a shared 2-core machine are noisy, so the tests check structure
(phases present, shares summing to the step) and exact byte counts, never
speeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from aihpc import models
from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.cli import main
from aihpc.profile import (
    PHASES,
    StepConfig,
    StepWorkload,
    characterise,
    check_fits,
    format_profile,
    measure_point,
    parse_values,
    plan_sweep,
    profile_workload,
)
from aihpc.profile.sweep import run_sweep
from aihpc.records.files import read_result_file
from fixture_run import aihpc_in_process

CPU = torch.device("cpu")
F32 = 4  # bytes per float32


def _mlp_workload(optimizer: str) -> StepWorkload:
    """Linear(64, 128) - ReLU - Linear(128, 10) on batches of 32 from a data set of 64 samples."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    inputs, targets = torch.randn(64, 64), torch.randint(10, (64, 1))
    return StepWorkload.from_parts(model, optimizer, inputs, targets, batch=32, device=CPU)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_memory_breakdown_of_an_mlp_worked_by_hand(optimizer: str) -> None:
    timing, memory = profile_workload(_mlp_workload(optimizer), steps=2)
    params = (64 * 128 + 128 + 128 * 10 + 10) * F32  # weights and biases: 9,610 floats
    assert memory.parameters == params == 38_440
    assert memory.gradients == params
    # SGD: one momentum buffer per parameter; AdamW: two moments + a float32 step per parameter
    # tensor
    assert memory.optimizer_state == (params if optimizer == "sgd" else 2 * params + 4 * F32)
    # saved for backward: the batch (first addmm's mat1), the ReLU output (also the second
    # addmm's mat1, one storage), log-softmax output, int64 targets, nll_loss's total_weight scalar
    assert (
        memory.activations
        == 32 * 64 * F32 + 32 * 128 * F32 + 32 * 10 * F32 + 32 * 8 + F32
        == 26_116
    )
    assert memory.other >= 0
    assert (
        memory.peak_bytes == memory.other + params * 2 + memory.optimizer_state + memory.activations
    )
    assert len(timing.step_seconds) == 2


def test_phases_present_and_their_shares_sum_to_the_step() -> None:
    """The phases' ranges cover the step but for the gaps between them (the profiler's own
    bookkeeping, 0.2 to 5 % of this 3 ms step), which the table reports as unattributed.

    A preemption of this process that falls in a gap is step time no phase has: beside five
    busy processes one of 8 ms fell before a step's data phase (the phases then held 85 % of the
    step), and under the full suite two profiles held 83 and 84 %.  So the best of up to three
    profiles is held to the step; every one of them to at most the step.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 10))
    inputs, targets = torch.randn(1024, 64), torch.randint(10, (1024, 1))
    workload = StepWorkload.from_parts(model, "sgd", inputs, targets, batch=512, device=CPU)
    covered: list[float] = []
    while len(covered) < 3 and (not covered or covered[-1] < 0.85):
        timing, _ = profile_workload(workload, steps=3)
        assert (
            [p.name for p in timing.phases]
            == list(PHASES)
            == ["data", "forward", "loss", "backward", "optimizer"]
        )
        assert all(p.seconds > 0 for p in timing.phases)
        assert len(timing.step_seconds) == 3 and timing.median > 0
        covered.append(sum(p.share for p in timing.phases))
        assert covered[-1] <= 1.0 + 1e-9
    assert max(covered) == pytest.approx(1.0, abs=0.15), covered


def test_cnn_profile_has_convolution_and_counted_ops() -> None:
    config = StepConfig.for_model("digits_cnn", batch=8, steps=2)
    prof = characterise(config, CPU)
    types = [o.type for o in prof.timing.operators]
    assert "convolution" in types
    assert not any("mkldnn" in t for t in types)  # kernels are charged to the op that reached them
    conv = next(o for o in prof.timing.operators if o.type == "convolution")
    assert conv.seconds > 0 and conv.calls >= 1
    assert sum(o.share for o in prof.timing.operators) < 1.0
    data = prof.to_record().to_dict()
    assert set(data) >= {
        "model",
        "input_shape",
        "batch",
        "device",
        "optimizer",
        "steps",
        "phases",
        "step_seconds",
        "operators",
        "ops",
        "flops_per_s",
        "memory",
        "sweep",
    }
    assert data["ops"]["total"] > 0
    assert data["flops_per_s"] == pytest.approx(data["ops"]["total"] / data["step_seconds"])
    assert set(data["memory"]) == {
        "peak_bytes",
        "parameters",
        "gradients",
        "optimizer_state",
        "activations",
        "other",
        "method",
    }
    assert data["memory"]["parameters"] == models.parameter_count("digits_cnn") * F32
    assert data["sweep"] is None
    json.dumps(data, allow_nan=False)
    table = format_profile(prof)
    assert "convolution" in table and "memory at the peak" in table and "backward" in table


@pytest.mark.slow
def test_sweep_over_batch_peak_memory_grows() -> None:
    config = StepConfig.for_model("digits_cnn", batch=4, steps=1)
    plan = plan_sweep(config, "batch", (2, 16, 64))
    lines: list[str] = []
    sweep = run_sweep(plan, "batch", lambda c: measure_point(c, CPU), lines.append)
    assert sweep.values == (2, 16, 64) and len(lines) == 3 and "(3/3)" in lines[-1]
    peaks = [r.peak_bytes for r in sweep.rows]
    assert peaks[0] < peaks[1] < peaks[2]
    assert all(r.step_seconds > 0 for r in sweep.rows)


def test_sweep_plans_and_their_rules() -> None:
    image = StepConfig.for_model("resnet20", batch=16)
    assert [c.batch for c in plan_sweep(image, "batch")] == [4, 8, 16, 32]
    assert [c.input_shape for c in plan_sweep(image, "resolution", (24, 8))] == [
        (3, 8, 8),
        (3, 24, 24),
    ]
    with pytest.raises(ConfigError, match="sweep 'seq-len' needs a sequence"):
        plan_sweep(image, "seq-len")
    tokens = StepConfig.for_model("lstm_lm", batch=4)
    assert [c.input_shape for c in plan_sweep(tokens, "seq-len")] == [(9,), (18,), (35,), (70,)]
    with pytest.raises(ConfigError, match="sweep 'resolution' needs an image model"):
        plan_sweep(tokens, "resolution")
    assert parse_values("32, 8,8") == (8, 32)
    for bad in ("", "8,,16", "0", "-1", "2.5"):
        with pytest.raises(ConfigError, match="--values"):
            parse_values(bad)


def test_configs_that_cannot_run_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="batch must be an integer >= 1, got 0"):
        StepConfig.for_model("resnet20", batch=0)
    with pytest.raises(ConfigError, match="must be T"):
        StepConfig.for_model("lstm_lm", batch=2, input_shape=(3, 8, 8))
    with pytest.raises(
        OutOfMemory, match=r"resnet18 at batch 100000, input 3x224x224 does not fit in cpu memory"
    ):
        check_fits(StepConfig.for_model("resnet18", batch=100_000), CPU)
    with pytest.raises(ConfigError, match="input 3x8x8 does not fit vgg11"):
        check_fits(StepConfig.for_model("vgg11", batch=1, input_shape=(3, 8, 8)), CPU)


def _aihpc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aihpc", "profile", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_writes_a_profile_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    proc = aihpc_in_process(
        capsys,
        "profile",
        "--model",
        "digits_cnn",
        "--batch",
        "4",
        "--steps",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "USDT" not in proc.stderr
    assert "memory at the peak" in proc.stdout and f"results: {out}" in proc.stdout
    doc = read_result_file(out, "profile").to_dict()
    assert doc["data"]["model"] == "digits_cnn" and doc["data"]["input_shape"] == [1, 8, 8]
    assert set(doc["data"]["phases"]) == set(PHASES)


@pytest.mark.slow
def test_cli_sweeps_an_lstm_over_sequence_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, plots = tmp_path / "lstm.json", tmp_path / "plots"
    plots.mkdir()
    proc = aihpc_in_process(
        capsys,
        "profile",
        "--model",
        "lstm_lm",
        "--batch",
        "2",
        "--input",
        "8",
        "--steps",
        "1",
        "--device",
        "cpu",
        "--sweep",
        "seq-len",
        "--values",
        "4,8",
        "--plots",
        str(plots),
        "--out",
        str(out),
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line]
    assert len(progress) == 3 and progress[0].startswith(
        "aihpc profile: lstm_lm at batch 2, input 8: "
    )
    assert all(line.startswith("aihpc profile: sweep seq-len") for line in progress[1:])
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "profile" and doc == read_result_file(out, "profile").to_dict()
    sweep = doc["data"]["sweep"]
    assert sweep["dimension"] == "seq-len" and sweep["values"] == [4, 8]
    assert sweep["rows"][0]["peak_bytes"] < sweep["rows"][1]["peak_bytes"]
    assert "lstm" in [o["type"] for o in doc["data"]["operators"]]
    for kind in ("time", "memory"):
        assert (plots / f"profile-lstm_lm-seq-len-{kind}.png").read_bytes()[
            :8
        ] == b"\x89PNG\r\n\x1a\n"


BAD_INPUTS = {
    "unknown-model": (["--model", "nope"], "unknown model 'nope'"),
    "seq-len-on-image": (
        ["--model", "resnet20", "--sweep", "seq-len"],
        "sweep 'seq-len' needs a sequence",
    ),
    "batch-0": (["--model", "resnet20", "--batch", "0"], "batch must be an integer >= 1, got 0"),
    "too-big": (["--model", "resnet18", "--batch", "100000"], "does not fit in cpu memory"),
    "sweep-value-too-big": (
        ["--model", "resnet20", "--sweep", "batch", "--values", "4,100000"],
        "batch 100000, input 3x32x32 does not fit",
    ),
    "shape-too-small": (["--model", "vgg11", "--input", "3x8x8"], "input 3x8x8 does not fit vgg11"),
    "out-dir-missing": (
        ["--model", "resnet20", "--out", "missing/p.json"],
        "directory missing does not exist",
    ),
    "bad-device": (
        ["--model", "resnet20", "--device", "gpu"],
        "device must be cpu, cuda, cuda:N or auto, got 'gpu'",
    ),
    "values-without-sweep": (["--model", "resnet20", "--values", "8,16"], "--values needs --sweep"),
}


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_exit_2_nothing_written(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    out = [] if "--out" in args else ["--out", "p.json"]
    assert main(["profile", *args, *out]) == (
        3 if any("100000" in a for a in args) else 2
    )  # too big for memory: 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("aihpc profile: error: ")
    assert list(tmp_path.iterdir()) == []


def test_bad_input_through_the_process_has_no_traceback(tmp_path: Path) -> None:
    proc = _aihpc("--model", "resnet20", "--sweep", "seq-len", "--out", "p.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
