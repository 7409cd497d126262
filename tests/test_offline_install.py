"""Install on a node without network: ``make wheelhouse``, then ``make install-offline`` with pip
cut off.

The compute node is played by a fresh virtual environment that has torch and
nothing else of aihpc's: the real torch of this test's own environment (and
what torch requires) linked into a folder of its own, which the venv sees
through a ``.pth`` file, as a node's Python sees the CUDA build its centre
installed.  Downloading torch instead would put a 180 MB (CPU) to several GB
(CUDA) wheel into the wheelhouse and take minutes to install; a node keeps its
own torch anyway, and this shows that it is kept.  Every other dependency must
come from the wheelhouse: the venv sees no other site-packages.

pip's network use is off while installing: ``--no-index`` (the script's),
``PIP_NO_INDEX=1``, a proxy that refuses every connection, and, where
``unshare`` may make one, a network namespace with no interfaces up.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "offline.py"

# a quick run, as tests/runner/test_run.py makes them, on one worker: what it shows is that the
# aihpc installed from the wheelhouse runs
QUICK = """dataset = "digits"
workers = 1
threads_per_worker = 1
epochs_min = 1
epochs_max = 2
batch_sizes = [64, 128]
report_seconds = 5.0
min_accuracy = 0.3
peak_seconds = 0.2
"""

# any attempt of pip's to reach a server fails at once
NO_NETWORK = {
    "PIP_NO_INDEX": "1",
    "PIP_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
}


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15) as response:
            return response.status == 200
    except OSError:
        return False


def _offline_prefix() -> list[str]:
    """``unshare --net`` where this user may make a network namespace (root): no network at all."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net"]
    return []


def _torch_alone(dest: Path) -> Path:
    """A folder with links to torch and the distributions it requires, from this test's
    environment."""
    dest.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
        for top in {Path(f).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            if not (dest / top).exists():
                (dest / top).symlink_to(dist.locate_file(top))
    return dest


def _node(tmp_path: Path) -> Path:
    """A compute node's Python: a plain venv from the base interpreter that sees torch and nothing
    more."""
    node = tmp_path / "node"
    subprocess.run([sys._base_executable, "-m", "venv", str(node)], check=True, capture_output=True)
    site = Path(
        subprocess.run(
            [
                node / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "node_torch.pth").write_text(f"{_torch_alone(tmp_path / 'system-torch')}\n")
    return node


def _base_has_torch() -> bool:
    code = "import importlib.util; print(importlib.util.find_spec('torch') is not None)"
    return (
        subprocess.run(
            [sys._base_executable, "-c", code], capture_output=True, text=True
        ).stdout.strip()
        == "True"
    )


def _make(*args: str, env: dict | None = None, prefix: list[str] = (), timeout: float = 600):
    return subprocess.run(
        [*prefix, "make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _in_node(node: Path, code: str) -> str:
    return subprocess.run(
        [node / "bin" / "python", "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.slow
@pytest.mark.xdist_group(
    "install"
)  # mostly pip; its own group, so it runs beside the groups of whole runs
def test_wheelhouse_then_install_offline_then_run(tmp_path: Path) -> None:
    if not _pypi_reachable():
        pytest.skip("PyPI cannot be reached from here: the wheelhouse cannot be made")
    wheelhouse = tmp_path / "wheelhouse"
    made = _make("wheelhouse", f"WHEELHOUSE={wheelhouse}", f"PYTHON={sys.executable}")
    assert made.returncode == 0, made.stderr
    names = {p.name.split("-")[0].lower() for p in wheelhouse.glob("*.whl")}
    assert {
        "aihpc",
        "dask",
        "distributed",
        "optuna",
        "dask_jobqueue",
        "mlperf_logging",
        "cryptography",
    } <= names
    assert "torch" not in names and "MB in" in made.stdout

    node = _node(tmp_path)
    torch_before = _in_node(node, "import torch; print(torch.__version__, torch.__file__)")
    # pip installs without compiling to bytecode, which is pip's work, not aihpc's, and took 20 of
    # this test's 65 core-s (pip reads PIP_NO_COMPILE=0 as --no-compile: its boolean options
    # invert in the environment)
    offline = {**os.environ, **NO_NETWORK, "PIP_NO_COMPILE": "0"}
    prefix = _offline_prefix()

    # a wheelhouse that lacks a needed wheel: one line naming it, exit 2, nothing installed
    partial = tmp_path / "partial"
    shutil.copytree(wheelhouse, partial, ignore=shutil.ignore_patterns("optuna-*"))
    refused = _make(
        "install-offline",
        f"WHEELHOUSE={partial}",
        f"PYTHON={node / 'bin' / 'python'}",
        env=offline,
        prefix=prefix,
    )
    assert refused.returncode != 0
    assert "install-offline: no wheel of optuna>=3.6 in wheelhouse" in refused.stderr, (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr

    # a Python with no torch, and none in the wheelhouse: one line saying so, nothing made
    if not _base_has_torch():
        venv = tmp_path / "venv"
        bare = _make(
            "install-offline",
            f"WHEELHOUSE={wheelhouse}",
            f"PYTHON={sys._base_executable}",
            f"VENV={venv}",
            env=offline,
            prefix=prefix,
        )
        assert bare.returncode != 0 and "has no torch and wheelhouse" in bare.stderr, bare.stderr
        assert not venv.exists()

    done = _make(
        "install-offline",
        f"WHEELHOUSE={wheelhouse}",
        f"PYTHON={node / 'bin' / 'python'}",
        env=offline,
        prefix=prefix,
    )
    assert done.returncode == 0, done.stderr
    assert f"into the virtual environment {node}" in done.stdout and "kept" in done.stdout
    # torch is the node's own, untouched; the rest came from the wheelhouse into the venv
    assert _in_node(node, "import torch; print(torch.__version__, torch.__file__)") == torch_before
    assert _in_node(node, "import optuna, dask; print(optuna.__file__)").startswith(str(node))

    run_dir = tmp_path / "run"
    (tmp_path / "run.toml").write_text(QUICK)
    run = subprocess.run(
        [
            node / "bin" / "aihpc",
            "run",
            "--minutes",
            "0.15",
            "--config",
            str(tmp_path / "run.toml"),
            "--out",
            str(run_dir),
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=offline,
    )
    assert run.returncode == 0, run.stderr
    assert "VALID" in run.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["score"]["valid"] and results["score"]["ops_per_second"] > 0


def _offline_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["install", "--wheelhouse", "/nonexistent/wh"],
            "install-offline: wheelhouse /nonexistent/wh does not exist",
        ),
        (
            ["wheelhouse", "--platform", "macosx_11_0_arm64"],
            "wheelhouse: platform must look like manylinux_2_28_x86_64 (or manylinux2014_aarch64), "
            "got 'macosx_11_0_arm64'",
        ),
        (
            ["wheelhouse", "--python-version", "312"],
            "wheelhouse: python version must look like 3.12, got '312'",
        ),
        (
            ["wheelhouse", "--extras", "gpu"],
            "wheelhouse: extras must be among infer, onnx, test, got gpu",
        ),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _offline_script(
        *args, *(["--dest", str(tmp_path / "wh")] if args[0] == "wheelhouse" else [])
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(
        message
    ), proc.stderr
    assert not (tmp_path / "wh").exists()  # nothing downloaded


def test_platform_tags_cover_the_older_manylinux_names() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from offline import platform_tags
    finally:
        sys.path.remove(str(SCRIPT.parent))
    tags = platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert tags.index("manylinux2014_x86_64") == tags.index("manylinux_2_17_x86_64") + 1
    assert (
        "manylinux2010_x86_64" in tags
        and "manylinux_2_29_x86_64" not in tags
        and len(tags) == 24 + 3
    )
    assert platform_tags("manylinux2014_aarch64")[0] == "manylinux_2_17_aarch64"
