"""PBS and LSF workers: the job scripts dask-jobqueue will submit (no PBS or LSF here to submit to)."""

from __future__ import annotations

import pytest

from aihpc.errors import ConfigError
from aihpc.runner.batch import batch_cluster, make_batch_cluster


@pytest.mark.parametrize(
    "system, cpus, gpus",
    [("pbs", "#PBS -l select=1:ncpus=4:ngpus=1", "ngpus=1"), ("lsf", "#BSUB -n 4", '#BSUB -gpu "num=1"')],
)
def test_job_script_books_cpus_gpu_tls_and_malloc(system, cpus, gpus, tmp_path):
    cluster = make_batch_cluster(system, cores_per_worker=4, memory_per_worker="8GiB", gpus_per_worker=1,
                                 queue="gpu", walltime="00:30", shared_temp_directory=tmp_path / "tls")  # fmt: skip
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert cpus in script and gpus in script
    assert "export OMP_NUM_THREADS=4" in script
    assert "export MALLOC_TRIM_THRESHOLD_=134217728" in script  # keeps PyTorch on CPU fast (executor.py)
    assert "tls://" in script and "--tls-key" in script  # workers join over TLS with the run's key
    assert "--nthreads 1" in script and "--name" in script
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700


def test_missing_submit_command_is_a_config_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match="PBS needs 'qsub' on PATH"):
        batch_cluster("pbs", 2, cores_per_worker=1, memory_per_worker="1GiB")


def test_unknown_system():
    with pytest.raises(ConfigError, match="batch system must be one of pbs, lsf, got 'sge'"):
        make_batch_cluster("sge", cores_per_worker=1, memory_per_worker="1GiB")
