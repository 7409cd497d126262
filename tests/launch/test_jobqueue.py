"""Workers as batch jobs (SLURM, PBS, LSF): the job scripts dask-jobqueue will submit, and bad
arguments.

Nothing is submitted here (``workers=0``); submitting to a real SLURM
cluster is tested in tests/launch/test_slurm.py.
"""

from __future__ import annotations

import re

import pytest

from aihpc.base.errors import ConfigError
from aihpc.launch.jobqueue import jobqueue_cluster


@pytest.mark.parametrize(
    "system, cpus, gpus",
    [
        ("slurm", "#SBATCH --cpus-per-task=4", "#SBATCH --gres=gpu:1"),
        ("pbs", "#PBS -l select=1:ncpus=4:ngpus=1", "ngpus=1"),
        ("lsf", "#BSUB -n 4", '#BSUB -gpu "num=1"'),
    ],
)
def test_job_script_books_cpus_gpu_tls_and_malloc(system, cpus, gpus, tmp_path):
    cluster = jobqueue_cluster(
        system,
        0,
        cores_per_worker=4,
        memory_per_worker="8GiB",
        gpus_per_worker=1,
        queue="gpu",
        walltime="00:30:00",
        key_dir=tmp_path / "tls",
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert cpus in script and gpus in script
    assert "export OMP_NUM_THREADS=4" in script
    assert (
        "export MALLOC_TRIM_THRESHOLD_=134217728" in script
    )  # keeps PyTorch on CPU fast (executor.py)
    assert "tls://" in script and "--tls-key" in script  # workers join over TLS with the run's key
    assert "--nthreads 1" in script and "--name" in script
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700


def test_the_workers_key_is_the_runs_own_files_and_goes_quietly_with_the_run(tmp_path):
    """The workers' CA, certificate and key are files in key_dir, readable by this user only,
    named on the worker's command line; removing them with the run leaves nothing for
    dask-jobqueue to delete when its cluster is collected (its own temporary copies printed
    "Exception ignored ... FileNotFoundError" on stderr once the run had removed them)."""
    import gc
    import shutil
    import sys

    from aihpc.launch.jobqueue import WORKER_FILES

    key_dir = tmp_path / "tls"
    cluster = jobqueue_cluster(
        "slurm", 0, cores_per_worker=1, memory_per_worker="1GiB", key_dir=key_dir
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    files = sorted(p.name for p in key_dir.iterdir())
    assert files == sorted(WORKER_FILES.values())
    assert all((key_dir / name).stat().st_mode & 0o777 == 0o600 for name in files)
    assert f"--tls-key {key_dir.resolve() / WORKER_FILES['tls_worker_key']}" in script
    assert "PRIVATE KEY" in (key_dir / WORKER_FILES["tls_worker_key"]).read_text()
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        shutil.rmtree(key_dir)  # as the run does when it ends
        del cluster
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert [u.exc_value for u in unraisable] == []


def test_tls_without_a_key_dir_is_refused():
    with pytest.raises(ValueError, match="key_dir"):
        jobqueue_cluster("slurm", 0, cores_per_worker=1, memory_per_worker="1GiB")


def test_extra_directives_and_no_tls():
    cluster = jobqueue_cluster(
        "slurm",
        0,
        cores_per_worker=1,
        memory_per_worker="1GiB",
        extra_directives=["--qos=short"],
        tls=False,
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "#SBATCH --qos=short" in script and "--tls-key" not in script and "--gres" not in script


@pytest.mark.parametrize(
    "system, directive", [("slurm", "#SBATCH --mem"), ("lsf", "#BSUB -M"), ("pbs", ":mem=")]
)
def test_by_default_a_job_asks_no_memory_and_its_nanny_sizes_the_limit_on_its_node(
    system, directive
):
    """Without --worker-memory the login node cannot know the node's memory: the job asks for
    none, the script says where its limit is set, and every nanny that joins is given the plugin
    that sets it (the node's memory less the reserve, over the workers per node) before its worker
    starts."""
    from aihpc.launch.memory import NodeShare

    cluster = jobqueue_cluster(
        system, 0, cores_per_worker=2, memory_per_worker=None, workers_per_node=4, tls=False
    )
    try:
        script = cluster.job_script()
        plugins = cluster.scheduler.nanny_plugins
    finally:
        cluster.close()
    assert directive not in script
    assert "the node's memory less the reserve, over 4 workers per node" in script
    import pickle

    plugin = pickle.loads(plugins[NodeShare.name])
    assert (plugin.batch, plugin.per_node, plugin.fixed) == (True, 4, None)


def test_with_worker_memory_a_job_asks_it_and_its_worker_has_it_as_its_limit():
    cluster = jobqueue_cluster("slurm", 0, cores_per_worker=1, memory_per_worker="6GiB", tls=False)
    try:
        script = cluster.job_script()
        plugins = cluster.scheduler.nanny_plugins
    finally:
        cluster.close()
    assert "#SBATCH --mem=6G" in script and "--memory-limit 6.00GiB" in script
    assert "aihpc-node-share" not in plugins


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"system": "sge"}, "batch system must be one of slurm, pbs, lsf, got 'sge'"),
        ({"workers": -1}, "workers must be >= 0, got -1"),
        ({"cores_per_worker": 0}, "cores per worker must be >= 1, got 0"),
        ({"memory_per_worker": "lots"}, "memory per worker must be a size like '4GiB', got 'lots'"),
        (
            {"memory_per_worker": "511MiB"},
            "memory per worker must be >= 512MiB (a worker with torch loaded, before it trains), "
            "got '511MiB'",
        ),
        ({"gpus_per_worker": -1}, "GPUs per worker must be >= 0, got -1"),
        ({"walltime": "1 hour"}, "walltime must be SLURM's"),
        ({"extra_directives": ["qos=short"]}, "sbatch options like"),
        ({"system": "pbs", "extra_directives": ["-l x\n-l y"]}, "single options like"),
        (
            {"interface": "no-such-if0"},
            "network interface must exist on this host, got 'no-such-if0'",
        ),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, message):
    args = {
        "system": "slurm",
        "workers": 2,
        "cores_per_worker": 1,
        "memory_per_worker": "1GiB",
        **kwargs,
    }
    with pytest.raises(ConfigError, match=re.escape(message)):
        jobqueue_cluster(**args)


@pytest.mark.parametrize(
    "system, command",
    [
        ("slurm", "SLURM's sbatch is not on PATH"),
        ("pbs", "PBS needs 'qsub' on PATH"),
        ("lsf", "LSF needs 'bsub' on PATH"),
    ],
)
def test_missing_submit_command_is_a_config_error(system, command, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no batch system's tools
    with pytest.raises(ConfigError, match=re.escape(command)):
        jobqueue_cluster(system, 1, cores_per_worker=1, memory_per_worker="1GiB")


@pytest.mark.parametrize(
    "system, gpus",
    [("slurm", "#SBATCH --gres=gpu:2"), ("pbs", "ngpus=2"), ("lsf", '#BSUB -gpu "num=2"')],
)
def test_a_worker_of_two_gpu_trials_books_two_gpus(system, gpus):
    from aihpc.launch.executor import batch_layout
    from aihpc.tasks import read_config

    config = read_config(
        {"batch_system": system, "nodes": 2, "gpus_per_node": 4, "procs_per_trial": 2}
    )
    layout = batch_layout(config.launch)
    assert (layout.workers, layout.procs, layout.device) == (
        4,
        2,
        "cuda",
    )  # 2 nodes x 4 GPUs / 2 per worker
    cluster = jobqueue_cluster(
        system,
        0,
        cores_per_worker=2,
        memory_per_worker="8GiB",
        gpus_per_worker=layout.procs,
        tls=False,
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert gpus in script


def test_gpus_per_node_must_be_a_multiple_of_gpus_per_trial():
    from aihpc.launch.executor import batch_layout
    from aihpc.tasks import read_config

    config = read_config(
        {"batch_system": "slurm", "nodes": 1, "gpus_per_node": 3, "procs_per_trial": 2}
    )
    with pytest.raises(
        ConfigError,
        match=re.escape("gpus_per_node must be a multiple of gpus_per_trial (2), got 3"),
    ):
        batch_layout(config.launch)
