"""``aihpc run`` on data sets whose training split is over 2 GiB as float32 (issue 18, item 1).

Before staging went chunk by chunk, every worker stopped before its first
trial with "split of ... needs ... MiB as float32, over max_bytes=2147483648".
Here each run stages such a set, trains on it until the budget runs out (on
2 CPU cores no epoch of it finishes: the point is that training starts and
its operations count), and reports the staging.  The imagefolder run
streams its set from a node-local file through the DataLoader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# its own xdist group: whole runs on large data, beside (not after) the other groups of whole runs
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("large")]

GIB = 2**30


def _run(tmp_path: Path, config: str) -> dict:
    (tmp_path / "run.toml").write_text(config)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--config",
            str(tmp_path / "run.toml"),
            "--out",
            str(out),
            "--no-live",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "data staging" in proc.stdout
    return json.loads((out / "results.json").read_text())


def _trained(results: dict) -> int:
    return sum(e["train_samples"] for t in results["trials"] for e in t["epochs"])


COMMON = """
workers = 1
threads_per_worker = 1
peak_seconds = 0.2
report_seconds = 10
epochs_min = 1
epochs_max = 1
"""


def test_a_synthetic_set_over_2_gib_is_staged_whole_and_trained_on(tmp_path):
    # 3x64x64 float32 is 48 KiB a sample: 44,800 training samples are 2.05 GiB (ResNet-20 seed);
    # difficulty 0 (no pixel noise to draw) keeps the generation quick
    results = _run(
        tmp_path,
        COMMON + "minutes = 0.2\nbatch_sizes = [64]\n[data_options]\nnum_samples = 56000\n"
        "num_classes = 10\nimage_size = 64\ndifficulty = 0.0\n",
    )
    staging = results["staging"]
    assert results["data"]["num_train"] * 3 * 64 * 64 * 4 > 2 * GIB
    assert staging["tiers"] == ["device"] and staging["per_worker"][0]["dtype"] == "float32"
    assert staging["bytes"] > 2.5 * GIB and staging["seconds"] > 0
    assert _trained(results) > 0 and results["score"]["ops"] > 0


def _image_folder(root: Path, images: int, classes: int) -> None:
    """``images`` tiny PNGs in ``classes`` class folders (decoded and resized to image_size when
    staged)."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
    for i in range(images):
        pixels = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        pixels[:, :, i % 3] = 25 * (i % classes)  # a class-dependent channel
        Image.fromarray(pixels).save(root / f"class{i % classes}" / f"{i}.png")


def test_an_imagefolder_over_2_gib_is_streamed_from_a_local_file(tmp_path):
    # 15,000 files at 3x128x128: 12,000 training samples are 2.20 GiB as float32 (ResNet-50 seed)
    _image_folder(tmp_path / "images", 15000, 10)
    stage_dir = tmp_path / "stage"
    results = _run(
        tmp_path,
        COMMON
        + "minutes = 0.3\n"  # its first batches come from files, decoded as they are read
        + f'dataset = "imagefolder"\ndata_path = "{tmp_path / "images"}"\n'
        f'staging = "stream"\nstage_dir = "{stage_dir}"\nmax_params = 30000000\n'
        "batch_sizes = [8]\n[data_options]\nimage_size = 128\nworkers = 2\n",
    )
    staging = results["staging"]
    assert results["data"]["num_train"] * 3 * 128 * 128 * 4 > 2 * GIB
    assert staging["tiers"] == ["stream"] and staging["bytes"] > 2.5 * GIB
    assert _trained(results) > 0 and results["score"]["ops"] > 0
    phases = results["trials"][0]["phase_seconds"]
    assert phases["data"] > 0  # the wait for streamed batches is timed as its own phase
    assert not list(
        stage_dir.glob("aihpc-stage-*")
    )  # the worker removed its staged files when it exited
