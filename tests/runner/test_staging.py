"""Data staging: every worker loads the data set onto its device before the run's clock starts."""

from __future__ import annotations

from aihpc.records.messages import DataRef
from aihpc.runner.measure import worker_stage
from aihpc.tasks import read_config, task_of
from aihpc.train.staging import stage

IMAGE = task_of("image")


def test_staged_data_is_what_the_first_epoch_finds_in_the_cache():
    config = IMAGE.default_workload(
        read_config(dict(dataset="synthetic", data_options={"num_samples": 600})), "cpu"
    )
    ref = DataRef.of(config)
    # the reference the master puts in every task: its options sorted, the run's seed, how to stage
    assert ref.options == tuple(sorted(config.options.ref_options().items()))
    assert ref.seed == config.run.seed and (ref.staging, ref.stage_dir) == ("auto", None)
    record = worker_stage(IMAGE, ref, "cpu")
    staged = stage(IMAGE, ref, "cpu")  # as the trainer asks for it: str(torch.device("cpu"))
    assert record["tier"] == "device" and record["dtype"] == "float32"
    assert record["bytes"] == sum(t.nbytes for s in (staged.train, staged.val) for t in (s.x, s.y))
    assert len(staged.train) + len(staged.val) == 600 and staged.train.x.shape[1:] == (3, 16, 16)
    assert stage(IMAGE, ref, "cpu") is staged  # kept: staged once per worker


def test_batch_sizes_are_sized_to_the_device_unless_given():
    def sized(device: str, **values):
        return IMAGE.default_workload(read_config(values), device)

    assert sized("cpu").search.batch_sizes == (32, 64, 128)  # the CPU default, unchanged
    assert sized("cuda").search.batch_sizes == (256, 512)
    assert sized("cuda", batch_sizes=(8,)).search.batch_sizes == (8,)
    assert sized("cuda").options.data_options["image_size"] == 128
    assert sized("cpu").options.data_options["image_size"] == 16


def test_a_stage_dir_that_cannot_be_made_is_one_line_from_the_master(tmp_path):
    """The worker's DataError comes back as a value: one line and exit 2, no worker traceback in the
    log."""
    import subprocess
    import sys

    (tmp_path / "run.toml").write_text(
        'dataset = "digits"\nworkers = 1\npeak_seconds = 0.2\nstaging = "stream"\n'
        'stage_dir = "/proc/no-such-folder"\n'
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--config",
            str(tmp_path / "run.toml"),
            "--out",
            str(tmp_path / "run"),
            "--minutes",
            "0.1",
            "--no-live",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "aihpc run: error: worker 0 could not stage the data: "
        "cannot stage data to /proc/no-such-folder: No such file or directory"
    )
