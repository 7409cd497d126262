"""Level 3, ``aihpc bench distributed``: data-parallel training against one process.

The two-process run launches real ranks (gloo over loopback), so it is slow
on a small machine: most of its time is the ranks importing PyTorch and DDP.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from aihpc import models
from aihpc.base.errors import ConfigError, ModelError
from aihpc.bench.distributed import DistributedConfig, ring_allreduce_bytes, step_times

VOLUME_TOLERANCE = 0.02
"""Measured TCP payload over the ring figure, minus 1, at most.  The payload cannot be
less than the ring's (those bytes must travel); measured on 2 and 3 ranks it exceeds
it by about 590 bytes per all-reduce on 2 ranks (gloo's message headers and the closing
barrier's share): 0.6 % for digits_cnn's 103,912 gradient bytes, 0.05 % for
resnet20's.  2 % leaves three times that margin."""


def test_ring_volume_against_a_hand_computation() -> None:
    # 1000 float32 gradients = 4000 B.  4 ranks: chunks of 1000 B; reduce-scatter sends
    # 3 chunks, all-gather 3 more: 6000 B per rank.
    assert ring_allreduce_bytes(4000, 4) == pytest.approx(6000)
    # 2 ranks: chunks of 2000 B, one per phase.
    assert ring_allreduce_bytes(4000, 2) == pytest.approx(4000)
    # 8 ranks: 7 + 7 chunks of 500 B.
    assert ring_allreduce_bytes(4000, 8) == pytest.approx(7000)
    assert ring_allreduce_bytes(4000, 1) == 0
    with pytest.raises(ValueError):
        ring_allreduce_bytes(4000, 0)


def test_step_figures_are_medians_and_overlap_is_what_ddp_hid() -> None:
    rows = [
        [0.10, 0.08, 0.03],
        [0.12, 0.09, 0.04],
        [0.11, 0.10, 0.02],
    ]  # [ddp, compute, all-reduce] per step
    t = step_times(rows, procs=2, batch=32)
    assert (t.step_s, t.compute_s, t.allreduce_s) == pytest.approx((0.11, 0.09, 0.03))
    assert t.overlap_s == pytest.approx(0.09 + 0.03 - 0.11)
    assert t.throughput == pytest.approx(2 * 32 / 0.11)
    assert t.step_spread == pytest.approx((0.115 - 0.105) / 0.11)  # quartiles of 3 points
    assert t.warning is None
    wide = step_times([*rows, [0.16, 0.1, 0.06]], procs=2, batch=32)
    assert wide.step_spread == pytest.approx((0.13 - 0.1075) / 0.115)
    assert wide.warning is not None and wide.warning.startswith(
        "2 process(es): the 4 step times spread over 20% of the median (IQR / median > 10%)"
    )


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"procs": 0}, ConfigError, "procs must be an integer >= 1, got 0"),
        ({"procs": 2, "steps": 0}, ConfigError, "steps must be an integer >= 1, got 0"),
        ({"procs": 2, "device": "tpu"}, ConfigError, "device must be cpu, cuda or auto, got 'tpu'"),
    ],
)
def test_bad_configuration(fields: dict, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        DistributedConfig(**fields)
    assert str(info.value) == message


def test_the_machine_bounds_the_processes() -> None:
    with pytest.raises(ConfigError, match="procs must be at most the .* got 99"):
        DistributedConfig(procs=99, device="cpu").backend()
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        DistributedConfig(procs=1, model="nope").backend()
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            DistributedConfig(procs=1, device="cuda").backend()


@pytest.mark.slow
def test_procs_beyond_the_cores_is_one_line_and_no_file(tmp_path) -> None:
    out = tmp_path / "d.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "bench",
            "distributed",
            "--procs",
            "99",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "procs must be at most the" in proc.stderr and "got 99" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_two_processes_through_the_cli(tmp_path) -> None:
    out = tmp_path / "distributed.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "bench",
            "distributed",
            "--procs",
            "2",
            "--model",
            "digits_cnn",
            "--batch",
            "16",
            "--steps",
            "8",
            "--warmup",
            "2",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "bench-distributed" and doc["schema_version"] == 1
    data = doc["data"]
    assert (
        data["procs"],
        data["backend"],
        data["model"],
        data["batch_per_rank"],
        data["steps"],
    ) == (2, "gloo", "digits_cnn", 16, 8)
    # no upper bound: beside a loaded suite the one-process baseline's 8 steps can be slowed more
    # than the two processes'; the efficiency's formula is checked below
    assert 0 < data["scaling_efficiency"] < float("inf")
    single, parallel = data["single"], data["parallel"]
    assert single["procs"] == 1 and parallel["procs"] == 2
    for run in (single, parallel):
        assert run["step_s"] > 0 and run["compute_s"] > 0 and run["allreduce_s"] >= 0
        assert run["overlap_s"] == pytest.approx(
            run["compute_s"] + run["allreduce_s"] - run["step_s"]
        )
    assert parallel["throughput"] == pytest.approx(2 * 16 / parallel["step_s"])
    assert data["scaling_efficiency"] == pytest.approx(
        parallel["throughput"] / (2 * single["throughput"])
    )
    assert (
        0 < data["allreduce_share"] == pytest.approx(parallel["allreduce_s"] / parallel["step_s"])
    )

    volume = data["volume"]
    assert volume["gradient_bytes"] == 4 * models.parameter_count("digits_cnn")
    assert volume["ring_bytes_per_rank_computed"] == pytest.approx(
        volume["gradient_bytes"]
    )  # 2 (2-1)/2 = 1
    assert volume["measured_by"].startswith("tcp_info")  # Linux >= 4.19
    assert 1.0 <= volume["ratio"] <= 1.0 + VOLUME_TOLERANCE
    assert volume["interface"] == "lo"  # both ranks on this node: gloo over loopback
    assert (
        volume["interface_bytes_per_rank"] >= volume["bytes_per_rank_measured"]
    )  # headers and ACKs on top
    assert data["launcher"] == "local" and data["nodes"] == 1 and len(data["hosts"]) == 2
    assert "scaling efficiency" in proc.stdout and "2 process(es)" in proc.stderr
