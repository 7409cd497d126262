#!/usr/bin/env python3
"""Install aihpc on a compute node without network access, from a folder of wheels.

Two steps (``make wheelhouse`` and ``make install-offline`` call them):

    python3 scripts/offline.py wheelhouse --dest wheelhouse [--python-version 3.12]
            [--platform manylinux_2_28_x86_64] [--torch 2.13.0] [--extras test,onnx]
        On a machine with network access (a login node): every wheel aihpc
        needs, for the named Python and platform (default: this machine's),
        into one folder: aihpc's own (``pip wheel --no-deps .``) and those of
        every dependency in pyproject.toml and theirs (``pip download
        --only-binary=:all:``).  torch is left out unless ``--torch`` names a
        version: a GPU node brings its own CUDA build.

    python3 scripts/offline.py install --wheelhouse wheelhouse [--venv .venv] [--extras test]
        On the compute node: installs from that folder only (``pip install
        --no-index --find-links``), keeping any torch the environment has.
        The interpreter that runs this script decides where aihpc goes:
        - a virtual environment's interpreter (an active venv's ``python3``):
          into that environment, since a venv made from it would not see its
          packages;
        - any other interpreter (the system's, pyenv's, a conda
          environment's): into a new venv ``--venv`` made with
          ``--system-site-packages``, so it sees the interpreter's torch.
        Where neither has torch, the wheelhouse must hold one.

Only the standard library: it runs before anything is installed.  Bad input
is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# PEP 600's names for the older manylinux tags, by the glibc minor version they stand for
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


class OfflineError(Exception):
    """A problem the user can fix: printed as one line, exit 2."""


# ---------------------------------------------------------------- the wheelhouse

def this_platform() -> str:
    """This machine's manylinux platform, e.g. manylinux_2_36_x86_64."""
    libc, version = platform.libc_ver()
    if libc != "glibc" or not version:
        raise OfflineError(f"cannot tell this machine's manylinux platform (libc {libc or 'unknown'}): "
                           "name one, e.g. PLATFORM=manylinux_2_28_x86_64")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def platform_tags(name: str) -> list[str]:
    """Every platform tag a pip on a ``name`` machine accepts, most specific first.

    pip matches each ``--platform`` tag exactly, while PyPI's wheels carry the
    oldest glibc they run on (manylinux_2_17_x86_64, ...) or its legacy alias
    (manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5).  A machine
    with glibc 2.28 runs all of them from 2_5 to 2_28, under either name; the
    order is the one pip uses on such a machine, so the newest build wins.
    """
    legacy = {alias: minor for minor, alias in LEGACY_MANYLINUX.items()}
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", name)
    alias = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", name)
    if match:
        newest, arch = int(match[1]), match[2]
    elif alias:
        newest, arch = legacy[alias[1]], alias[2]
    else:
        raise OfflineError(f"platform must look like manylinux_2_28_x86_64 (or manylinux2014_aarch64), got {name!r}")
    tags = []
    for minor in range(newest, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in LEGACY_MANYLINUX:
            tags.append(f"{LEGACY_MANYLINUX[minor]}_{arch}")
    return tags


def requirements(torch: str | None, extras: list[str]) -> list[str]:
    """pyproject.toml's dependencies and the named extras' (torch only when a version is named)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise OfflineError(f"extras must be among {', '.join(sorted(optional))}, got {','.join(unknown)}")
    reqs = [r for r in project["dependencies"] if requirement_name(r) != "torch"]
    if torch:
        reqs.append(f"torch=={torch}")
    else:
        # the node's own torch requires setuptools (torch 2.13: setuptools>=77.0.3), and a venv made by
        # Python 3.11 holds setuptools 65.5, which hides the node's newer one: pip then needs a wheel
        reqs.append("setuptools")
    for extra in extras:
        reqs += [r for r in optional[extra] if r not in reqs]
    return reqs


def requirement_name(req: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", req)[0].lower().replace("_", "-")


def pip(python: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, env=env)


def pip_failure(proc: subprocess.CompletedProcess) -> str:
    """pip's error in a few words: the requirement it found no wheel for, else its last ERROR line."""
    missing = re.findall(r"No matching distribution found for ([^;\s]+)", proc.stderr)
    if missing:
        return f"no wheel of {missing[-1]}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    return (errors[-1] if errors else (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1])


def build_aihpc_wheel(dest: Path) -> None:
    """``pip wheel --no-deps`` of a copy of what the build reads (pyproject.toml, README.md, src/).

    setuptools leaves build/ and *.egg-info in the tree it builds, and a stale
    build/lib (holding a module since deleted) would go into the next wheel.
    """
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "aihpc"
        shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, source / name)
        built = pip(sys.executable, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest.resolve()), str(source))
    if built.returncode:
        raise OfflineError(f"building aihpc's wheel failed: {pip_failure(built)}")


def make_wheelhouse(dest: Path, python_version: str, platform_name: str, torch: str | None,
                    extras: list[str]) -> None:
    if not re.fullmatch(r"3\.\d+", python_version):
        raise OfflineError(f"python version must look like 3.12, got {python_version!r}")
    if torch is not None and not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+]*)", torch):
        raise OfflineError(f"torch must be a version like 2.13.0, got {torch!r}")
    tags = platform_tags(platform_name)
    reqs = requirements(torch, extras)
    dest.mkdir(parents=True, exist_ok=True)
    print(f"wheelhouse: aihpc and {len(reqs)} requirements for CPython {python_version} on {platform_name} "
          f"into {dest}/ ...", flush=True)
    build_aihpc_wheel(dest)
    target = ["--python-version", python_version, "--implementation", "cp"]
    for tag in tags:
        target += ["--platform", tag]
    got = pip(sys.executable, "download", "--quiet", "--only-binary=:all:", "--dest", str(dest), *target, *reqs)
    if got.returncode:
        raise OfflineError(f"{pip_failure(got)} for CPython {python_version} on {platform_name} "
                           "(is the index reachable from here?)")
    wheels = sorted(dest.glob("*.whl"), key=lambda p: p.name.lower())
    size = sum(p.stat().st_size for p in wheels)
    for wheel in wheels:
        name, version = wheel.name.split("-")[:2]
        print(f"  {name} {version}  ({wheel.stat().st_size / 1e6:.1f} MB)")
    has_torch = any(p.name.startswith("torch-") for p in wheels)
    print(f"wheelhouse: {len(wheels)} wheels, {size / 1e6:.0f} MB in {dest}/"
          + ("" if has_torch else "; no torch (a GPU node brings its own; TORCH=2.13.0 adds one)"))


# ---------------------------------------------------------------- installing from it

def in_virtual_env() -> bool:
    return sys.prefix != sys.base_prefix


def this_torch() -> str | None:
    """The version of the torch this interpreter imports, or None."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


def target_environment(venv: Path) -> tuple[str, str]:
    """The Python to install into, and where that is in words; makes ``venv`` where it is the answer.

    A venv made from a virtual environment's interpreter sees only the base
    interpreter's packages, not that environment's (its torch among them), so
    a virtual environment gets aihpc itself; any other interpreter gets a new
    venv that sees its packages, as ``make install`` makes.
    """
    if in_virtual_env():
        return sys.executable, f"the virtual environment {sys.prefix}"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode:
        raise OfflineError(f"creating the venv {venv} failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
    return str(venv / "bin" / "python"), f"{venv} (a venv that sees {sys.executable}'s packages)"


def install(wheelhouse: Path, venv: Path, extras: list[str]) -> None:
    if not wheelhouse.is_dir():
        raise OfflineError(f"wheelhouse {wheelhouse} does not exist: make it with `make wheelhouse` "
                           "on a machine with network access, and copy it here")
    ours = list(wheelhouse.glob("aihpc-*.whl"))
    if not ours:
        raise OfflineError(f"wheelhouse {wheelhouse} has no aihpc wheel: make it with `make wheelhouse`")
    aihpc_wheel = max(ours, key=lambda p: p.stat().st_mtime)  # the latest build, where there are several
    torch = this_torch()
    if torch is None and not list(wheelhouse.glob("torch-*.whl")):
        raise OfflineError(f"{sys.executable} has no torch and wheelhouse {wheelhouse} has none: use a Python "
                           "that has torch (PYTHON=...), or make the wheelhouse with TORCH=2.13.0")
    python, where = target_environment(venv)
    print(f"install-offline: into {where}; torch "
          + (f"{torch} kept" if torch else f"from {wheelhouse}"), flush=True)
    wheel = str(aihpc_wheel) + (f"[{','.join(extras)}]" if extras else "")
    # from the wheelhouse only: no index, and no pip configuration adding other places to look
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env["PIP_CONFIG_FILE"] = os.devnull
    offline = ["--no-index", "--find-links", str(wheelhouse)]
    done = pip(python, "install", *offline, wheel, env=env)
    if done.returncode:
        raise OfflineError(f"{pip_failure(done)} in wheelhouse {wheelhouse} for CPython "
                           f"{sys.version_info[0]}.{sys.version_info[1]} on {this_platform()}")
    # the same aihpc version already installed counts as satisfied: put this wheel's code in place
    again = pip(python, "install", *offline, "--no-deps", "--force-reinstall", str(aihpc_wheel), env=env)
    if again.returncode:
        raise OfflineError(f"reinstalling {aihpc_wheel.name} failed: {pip_failure(again)}")
    installed = [line for line in done.stdout.splitlines() if line.startswith("Successfully installed")]
    print(f"install-offline: {installed[-1] if installed else 'nothing new besides aihpc'}")
    print(f"install-offline: run it with {Path(python).parent / 'aihpc'} run")


# ---------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wh = sub.add_parser("wheelhouse", help="download every wheel aihpc needs into one folder")
    wh.add_argument("--dest", type=Path, default=Path("wheelhouse"))
    wh.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    wh.add_argument("--platform", default=None, help="e.g. manylinux_2_28_x86_64 (default: this machine's)")
    wh.add_argument("--torch", default=None, help="a torch version to include, e.g. 2.13.0 (default: none)")
    wh.add_argument("--extras", default="", help="extras to include, comma-separated: test, onnx")
    inst = sub.add_parser("install", help="install from the wheelhouse only, keeping an existing torch")
    inst.add_argument("--wheelhouse", type=Path, default=Path("wheelhouse"))
    inst.add_argument("--venv", type=Path, default=Path(".venv"))
    inst.add_argument("--extras", default="", help="extras to install, comma-separated: test, onnx")
    args = parser.parse_args(argv)
    extras = [e for e in args.extras.split(",") if e]
    try:
        if args.command == "wheelhouse":
            make_wheelhouse(args.dest, args.python_version, args.platform or this_platform(), args.torch or None,
                            extras)
        else:
            install(args.wheelhouse, args.venv, extras)
    except OfflineError as exc:
        print(f"{'install-offline' if args.command == 'install' else args.command}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
