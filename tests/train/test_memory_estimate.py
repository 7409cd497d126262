"""The host memory estimate of a trial (:mod:`aihpc.train.memory`) against the resident memory
measured on this CPU: one epoch per case, each in a process of its own (tests/train/
memory_case.py), for networks of both tasks from hundreds of thousands to millions of
parameters, fresh and started from a weight file.  The estimate, added to what the process held
before the epoch, must lie within a factor of 1.5 of its peak resident memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.language.spec import seed_lm_spec
from aihpc.train.memory import TrialMemory, saved_bytes, trial_memory

CASE = Path(__file__).with_name("memory_case.py")
SGD = {"lr": 0.05, "optimizer": "sgd", "momentum": 0.9}
ADAMW = {"lr": 1e-3, "optimizer": "adamw"}


def _image(side: int, batch: int, samples: int, hparams: dict, **seed) -> dict:
    return {
        "task": "image",
        "data": "synthetic",
        "options": {"num_samples": samples, "image_size": side, "num_classes": 50},
        "arch": seed_spec((3, side, side), 50, **seed).to_dict(),
        "hparams": {**hparams, "batch_size": batch},
    }


def _lm(width: int, layers: int, batch: int, steps: int, start: bool = False) -> dict:
    context = 128
    spec = seed_lm_spec(
        vocab_size=257,
        context=context,
        width=width,
        layers=layers,
        heads=width // 32,
        head_dim=32,
        mlp_hidden=4 * width,
    )
    options = {
        "train_tokens": 1 << 16,
        "doc_length": context,
        "epoch_tokens": steps * batch * context,
    }
    return {
        "task": "lm",
        "data": "synthetic",
        "options": options,
        "arch": spec.to_dict(),
        "hparams": {**ADAMW, "batch_size": batch},
        "from_file": start,
    }


CASES = {
    "image 0.28M params, 32x32, batch 256": _image(32, 256, 600, SGD),
    "image 2.8M params, 32x32, batch 64, adamw": _image(
        32, 64, 200, ADAMW, size="cifar", width=64, blocks=2
    ),
    "lm 3.3M params, batch 32": _lm(256, 4, 32, 2),
    "lm 13M params, batch 2, from its weight file": _lm(512, 4, 2, 2, start=True),
}


def _measure(case: dict, tmp_path: Path) -> dict:
    case = {**case, "weights_dir": str(tmp_path)}
    if case.pop("from_file", False):  # a first epoch writes the file the measured one starts from
        case["start"] = _run(case)["weights"]
    return _run(case)


def _run(case: dict) -> dict:
    done = subprocess.run(
        [sys.executable, str(CASE), json.dumps(case)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_the_estimate_is_within_a_factor_of_1_5_of_the_resident_memory(
    name: str, tmp_path: Path
) -> None:
    measured = _measure(CASES[name], tmp_path)
    assert measured["status"] == "ok" and measured["samples"] > 0, measured
    ratio = measured["estimate"] / measured["peak"]
    assert 1 / 1.5 <= ratio <= 1.5, (name, ratio, measured)


def test_a_step_s_saved_tensors_grow_with_the_batch_and_leave_the_parameters_out() -> None:
    task = task_of("lm")
    spec = seed_lm_spec(
        vocab_size=257, context=64, width=64, layers=2, heads=2, head_dim=32, mlp_hidden=256
    )
    one, four = saved_bytes(task, spec, 1), saved_bytes(task, spec, 4)
    assert four == pytest.approx(4 * one, rel=0.01)  # activations only: linear in the batch
    # the logits a step keeps for its loss: batch × context × vocabulary float32, at least
    assert one >= 64 * 257 * 4


def test_the_peak_is_the_largest_phase_and_a_gpu_keeps_the_model_on_the_device() -> None:
    parts = TrialMemory(loading=5, model=3, activations=4, snapshot=2, trainer=1, procs=2)
    assert parts.peak == 2 * (1 + max(5, 3 + 4))
    task, spec = task_of("image"), seed_spec((3, 16, 16), 10)
    hparams = Hyperparameters(lr=0.1, batch_size=32)  # SGD with momentum: one value per parameter
    params = spec.num_params()
    gpu = trial_memory(task, spec, hparams, "cuda", params)
    assert (gpu.model, gpu.activations) == (0, 0)
    assert gpu.loading == 2 * 2 * params * 4  # the file read and its tensors: weights and momentum
    assert gpu.snapshot == 2 * 2 * params * 4  # pinned: rounded up to powers of two, at most 2x
    cpu = trial_memory(task, spec, hparams, "cpu", None)
    assert cpu.loading == params * 4 and cpu.model == 3 * params * 4 and cpu.activations > 0
