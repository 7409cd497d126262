"""The GPU path, on a real GPU: CUDA-event phase timing, the default GPU workload,
benchmarks/gpu_fill.py.

Every test here but the last is marked ``gpu`` and skipped, with the reason,
where CUDA is not available; the last checks that the benchmark says so
plainly on such a machine.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aihpc.records.messages import DataRef, EpochTask
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.task import DEFAULT_BATCH_SIZES, DEFAULT_SYNTHETIC
from aihpc.train.timing import timer_for
from aihpc.train.worker import run_epoch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU; torch sees none here"
)


def _gpu_task(weights_dir: Path, samples: int, **changes) -> EpochTask:
    options = {**DEFAULT_SYNTHETIC["cuda"], "num_samples": samples}
    spec = seed_spec((3, options["image_size"], options["image_size"]), options["num_classes"])
    hp = {
        "lr": 0.1,
        "batch_size": DEFAULT_BATCH_SIZES["cuda"][0],
        "weight_decay": 5e-5,
        "momentum": 0.9,
        "dropout": 0.0,
        "optimizer": "sgd",
        "schedule": "cosine",
    }
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=spec.to_dict(),
        hparams=hp,
        data=DataRef("synthetic", options=tuple(sorted(options.items()))),
        deadline=time.time() + 600,
        seed=0,
        weights_dir=str(weights_dir),
        device="cuda",
    )
    base.update(changes)
    return EpochTask(**{**base, "hparams": Hyperparameters.from_dict(base["hparams"])})


@pytest.mark.gpu
@needs_gpu
def test_cuda_events_time_queued_work_with_one_wait():
    device = torch.device("cuda", 0)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    a = (a @ a).clamp_(-1, 1)  # cuBLAS's first call sets up on the host: not a launch to time
    timer = timer_for(device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        with timer("forward"):
            a = (a @ a).clamp_(-1, 1)
    launched = time.perf_counter() - t0
    assert timer.pending == 20
    seconds = timer.seconds()["forward"]
    wall = time.perf_counter() - t0
    # 20 x 2 x 8192^3 = 22 TFLOP (about 30 ms on an H100): the events see the kernels' time, up to
    # the wall time it all took
    assert 0 < seconds <= wall and timer.pending == 0
    # the host queued all 20 phases in a fraction of the kernels' time: had a phase's end waited for
    # its kernels, launching would have taken as long as they ran
    assert launched < 0.25 * seconds, (launched, seconds)


@pytest.mark.gpu
@needs_gpu
def test_the_training_loop_waits_for_the_gpu_once_in_check_every_steps(tmp_path):
    """Counts the host's waits for the GPU in a real epoch's steps (CUDA's sync debug mode warns on
    each)."""
    import warnings

    from aihpc.train import trainer

    device = torch.device("cuda", 0)
    task = _gpu_task(tmp_path, 8192)  # the ResNet-50 seed, batch 256
    setup = trainer.prepare(task_of("image"), task, device, trainer.SINGLE)
    trainer.train_steps(
        task, setup, timer_for(device), trainer.SINGLE
    )  # warm-up: cuDNN's autotuning
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            progress = trainer.train_steps(task, setup, timer_for(device), trainer.SINGLE)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [w for w in caught if "synchroniz" in str(w.message)]
    batch = task.hparams.batch_size
    steps = len(setup.data.train) // batch  # the training split's full batches: 25 of 6,553 samples
    assert progress.status == "ok" and steps >= 20 and progress.seen == steps * batch
    # a wait at each checked step (the first, every 16th, the last: 3 of 25), then the sums read at
    # the end and the timer's one wait (5 on an H200 with torch 2.11); a wait in every step would
    # make 25 or more
    every = trainer.CHECK_EVERY["cuda"]
    checks = len([i for i in range(steps) if i % every == 0 or i == steps - 1])
    assert checks <= len(waits) <= checks + 2, [str(w.message) for w in waits]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("compile", [False, True])
def test_epochs_of_the_default_gpu_workload(tmp_path, compile):
    first = run_epoch(task_of("image"), _gpu_task(tmp_path, 2048, compile=compile))
    assert first.status == "ok", first.reason
    assert (
        first.device.startswith("cuda") and first.num_params == 23_712_932
    )  # the ResNet-50 seed, 100 classes
    assert first.ops_train == round(first.ops_per_sample["train"] * first.metrics["train_samples"])
    assert first.ops_per_sample["train"] == pytest.approx(
        8.007e9, rel=1e-3
    )  # aihpc count, 3x128x128
    second = run_epoch(
        task_of("image"), _gpu_task(tmp_path, 2048, compile=compile, epoch=2, start=first.weights)
    )
    assert second.status == "ok" and second.phase_seconds["compile"] == 0.0
    assert (first.phase_seconds["compile"] > 0) == compile
    work = sum(
        second.phase_seconds[p] for p in ("data", "forward", "backward", "optimizer", "eval")
    )
    assert 0 < work <= second.t_end - second.t_start


def _lm_task(weights_dir: Path, **changes) -> EpochTask:
    from aihpc.tasks.language.spec import seed_lm_spec

    spec = seed_lm_spec(
        vocab_size=257, context=256, width=256, layers=4, heads=4, head_dim=64, mlp_hidden=1024
    )
    options = (("doc_length", 256), ("epoch_tokens", 1 << 18), ("train_tokens", 1 << 19))
    hp = Hyperparameters(lr=1e-3, batch_size=32, weight_decay=0.01, optimizer="adamw", warmup=0.1)
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=spec.to_dict(),
        hparams=hp,
        data=DataRef("synthetic", options=options, task="lm"),
        deadline=time.time() + 600,
        seed=0,
        weights_dir=str(weights_dir),
        device="cuda",
    )
    return EpochTask(**{**base, **changes})


@pytest.mark.gpu
@needs_gpu
def test_a_language_trial_trains_alike_eager_and_with_compiled_blocks(tmp_path):
    """A 4-block language model on bfloat16 compute weights (the GPU default), eagerly and with
    its blocks compiled by inductor: one compilation for the four equal blocks, the same losses
    within bfloat16's rounding, the weight files in float32."""
    from aihpc.train.weights import load

    eager = run_epoch(task_of("lm"), _lm_task(tmp_path, trial_id=1, compile=False))
    compiled = run_epoch(task_of("lm"), _lm_task(tmp_path, trial_id=2, compile=True))
    assert eager.status == compiled.status == "ok", (eager.reason, compiled.reason)
    assert compiled.metrics["regions_needed"] == 4 and compiled.metrics["regions_compiled"] == 1
    for key in ("train_loss", "val_loss"):
        assert compiled.metrics[key] == pytest.approx(eager.metrics[key], rel=0.02), key
    state, optimizer = load(tmp_path, compiled.weights)
    assert all(t.dtype == torch.float32 for t in state.values()) and optimizer is not None


@pytest.mark.gpu
@pytest.mark.slow
@needs_gpu
def test_gpu_fill_prints_its_figures(tmp_path):
    cmd = [
        sys.executable,
        str(BENCHMARKS / "gpu_fill.py"),
        "--minutes",
        "0.5",
        "--samples",
        "4096",
        "--profile-samples",
        "1024",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=BENCHMARKS, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    for label in (
        "score",
        "share of peak",
        "busy fraction",
        "per epoch",
        "energy",
        "profiled epoch",
        "GPU idle",
        "GPU time by type",
    ):
        assert label in out.stdout


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message on a machine without a GPU"
)
def test_gpu_fill_says_plainly_that_there_is_no_gpu():
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_fill.py"), "--minutes", "0.1"],
        capture_output=True,
        text=True,
        cwd=BENCHMARKS,
        timeout=120,
    )
    assert out.returncode == 2 and "no CUDA GPU on this machine" in out.stderr and out.stdout == ""
