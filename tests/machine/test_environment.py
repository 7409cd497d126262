"""Tests for aihpc.machine.environment.collect."""

from __future__ import annotations

import json
import platform
import re
import subprocess
from pathlib import Path

import psutil
import pytest
import torch

import aihpc
from aihpc.machine import environment
from aihpc.machine.environment import collect, git_state

REPO = Path(aihpc.__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def info() -> dict:
    return collect().to_dict()


def _git_available_here() -> bool:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def test_fields_and_types(info: dict) -> None:
    expected = {
        "aihpc_version": str,
        "cpu_logical_cores": int,
        "cpu_model": str,
        "hostname": str,
        "machine": str,
        "memory_total_bytes": int,
        "numpy_version": str,
        "os": str,
        "python_implementation": str,
        "python_version": str,
        "torch_num_interop_threads": int,
        "torch_num_threads": int,
        "torch_version": str,
        "gpus": list,
    }
    for key, typ in expected.items():
        assert isinstance(info[key], typ), (key, info[key])
    for key in ("cpu_physical_cores", "cudnn_version"):
        assert info[key] is None or isinstance(info[key], int)
    for key in ("cuda_version", "nvidia_driver_version", "git_commit"):
        assert info[key] is None or isinstance(info[key], str)
    assert set(info) == {
        *expected,
        "cpu_physical_cores",
        "cudnn_version",
        "cuda_version",
        "nvidia_driver_version",
        "git_commit",
        "git_dirty",
        "cpu",
    }


def test_values_match_independent_sources(info: dict) -> None:
    assert info["aihpc_version"] == aihpc.__version__
    assert info["python_version"] == platform.python_version()
    assert info["torch_version"] == str(torch.__version__)
    assert info["torch_num_threads"] == torch.get_num_threads()
    assert info["cpu_logical_cores"] == psutil.cpu_count()
    assert info["memory_total_bytes"] == psutil.virtual_memory().total
    assert info["cuda_version"] == torch.version.cuda
    if not torch.cuda.is_available():
        assert info["gpus"] == []
    else:
        assert len(info["gpus"]) == torch.cuda.device_count()
        for gpu in info["gpus"]:
            assert re.fullmatch(r"\d+\.\d+", gpu["compute_capability"])
            assert gpu["memory_bytes"] > 0


def test_cpu_model_from_proc_cpuinfo() -> None:
    path = Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo")
    names = [
        line.split(":", 1)[1].strip()
        for line in path.read_text().splitlines()
        if line.split(":", 1)[0].strip() == "model name"
    ]
    if names:
        assert environment.cpu_model() == names[0]


def test_keys_sorted_and_json_serialisable(info: dict) -> None:
    assert list(info) == sorted(info)
    text = json.dumps(info)
    assert json.loads(text) == info


@pytest.mark.skipif(not _git_available_here(), reason="source tree is not a git checkout")
def test_git_commit_of_this_checkout(info: dict) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert info["git_commit"] == head
    assert re.fullmatch(r"[0-9a-f]{40}", info["git_commit"])
    assert isinstance(info["git_dirty"], bool)
    commit, dirty = git_state(REPO / "tests")
    assert commit == head and isinstance(dirty, bool)


def test_non_git_directory_gives_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stop git from discovering any repository above tmp_path.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    info = collect(repo_dir=tmp_path)
    assert info.git_commit is None
    assert info.git_dirty is None
    assert git_state(tmp_path / "does-not-exist") == (None, None)


def test_git_missing_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert git_state(REPO) == (None, None)
    assert environment.nvidia_driver_version() is None


def test_dirty_flag_follows_working_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _git_available_here():
        pytest.skip("git unavailable")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(tmp_path),
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    assert git_state(tmp_path) == (None, None)  # no commit yet
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "a.txt").write_text("2")
    assert git_state(tmp_path) == (head, True)
    (tmp_path / ".gitignore").write_text("venv/\n")
    (tmp_path / "venv").mkdir()
    assert git_state(tmp_path / "venv") == (None, None)  # ignored dir: not this checkout's source


def test_git_timeout_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "GIT_TIMEOUT_S", 0.0)
    assert git_state(REPO) == (None, None)


def test_the_record_reads_back_what_it_wrote_and_older_files() -> None:
    from aihpc.base.errors import DataError
    from aihpc.machine.environment import Environment, Gpu

    record = collect()
    assert Environment.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    gpu = {
        "compute_capability": "9.0",
        "index": 0,
        "memory_bytes": 80 * 2**30,
        "multiprocessors": 132,
        "name": "H100",
    }
    with_gpu = Environment.from_dict({**record.to_dict(), "gpus": [gpu]})
    assert with_gpu.gpus == (Gpu(0, "H100", 80 * 2**30, "9.0", 132),) and with_gpu.to_dict()[
        "gpus"
    ] == [gpu]
    assert with_gpu.machine_name() == f"{record.hostname}: 1x H100"
    # results.json version 1 named other fields: what this version knows of it is None
    old = Environment.from_dict(
        {"cpu_count": 2, "cpu_model": "AMD EPYC", "hostname": "node-7", "gpus": []}
    )
    assert old.cpu_logical_cores is None and old.machine_name() == "node-7: AMD EPYC, ? cores"
    with pytest.raises(DataError, match="git_commit must be 40 hex digits, got 'abc'"):
        Environment.from_dict({"git_commit": "abc"})
    with pytest.raises(DataError, match="compute_capability must be 'M.m', got '9'"):
        Gpu(0, "H100", 1, "9", 1)
    with pytest.raises(DataError, match="a GPU of the environment lacks memory_bytes"):
        Environment.from_dict(
            {
                "gpus": [
                    {"compute_capability": "9.0", "index": 0, "name": "H100", "multiprocessors": 1}
                ]
            }
        )


def test_the_processor_is_recorded_and_read_back(info: dict) -> None:
    from aihpc.machine.environment import Environment
    from aihpc.machine.processor import Processor, describe_processor

    cpu = info["cpu"]
    assert isinstance(cpu, dict) and list(cpu) == sorted(cpu)
    again = describe_processor().to_dict()  # "cpu MHz" may move between reads on bare metal
    assert {k: v for k, v in cpu.items() if k != "clock_mhz"} == {
        k: v for k, v in again.items() if k != "clock_mhz"
    }
    record = Environment.from_dict(json.loads(json.dumps(info)))
    assert isinstance(record.cpu, Processor) and record.cpu.to_dict() == cpu
    assert record.to_dict()["cpu"] == cpu  # the round trip keeps it


def test_an_older_environment_without_cpu_still_reads(info: dict) -> None:
    from aihpc.machine.environment import Environment

    older = {k: v for k, v in info.items() if k != "cpu"}
    record = Environment.from_dict(older)
    assert record.cpu is None and record.to_dict()["cpu"] is None
    assert record.cpu_model == info["cpu_model"]
    partial = Environment.from_dict({**older, "cpu": {"vendor": "AuthenticAMD", "family": 26}})
    assert partial.cpu is not None and partial.cpu.vendor == "AuthenticAMD"
    assert partial.cpu.family == 26
    assert partial.cpu.extensions == () and partial.cpu.clock_mhz is None
