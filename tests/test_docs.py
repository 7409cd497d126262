"""The README and the documentation site (docs/, mkdocs.yml) hold to the code.

The site is built as its readers get it, ``mkdocs build --strict``: a broken link or anchor, a
page left out of the navigation, or an API page naming a module that is gone fails.  Every
command the README and the site show is parsed by aihpc's own command line (and every ``make``
target, script and file they name must exist), the configuration reference names every
setting (the sections' and each built-in task's own) and every ``aihpc run`` flag, and every
measurement page is listed in its index.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aihpc.cli import COMMANDS, build_parser
from aihpc.cli import run as run_cli
from cli.test_config_flags import settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
MEASUREMENTS = DOCS / "measurements"

# fenced blocks of commands; output is fenced as ```text and not parsed
COMMAND_FENCES = ("", "sh", "bash", "console", "shell")
# a path in a command that names a file of this repository, which must exist
REPO_PATH = re.compile(r"^(benchmarks|tests|examples|scripts|src)/[\w./-]+$")


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_architecture_page_included(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # ARCHITECTURE.md (which tests/test_layers.py parses) is the design page, included whole
    architecture = (site / "design" / "architecture" / "index.html").read_text()
    first_heading = ROOT.joinpath("ARCHITECTURE.md").read_text().splitlines()[0].lstrip("# ")
    assert first_heading in architecture and "<table>" in architecture
    assert (site / "reference" / "api" / "results" / "index.html").is_file()


def test_the_readme_is_a_short_guide_that_starts_with_the_benchmark() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    assert any("aihpc run" in line for line in lines[:40])
    assert "make run" in README.read_text() and "make test" in README.read_text()
    # the main commands, one example each: every command of the CLI has its row
    rows = dict(re.findall(r"^\| `([\w-]+)` \| `(aihpc [^`]+)` \|", README.read_text(), re.M))
    assert sorted(rows) == sorted(COMMANDS)
    assert all(example.split()[1] == name for name, example in rows.items())


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(info string, lines) of every fenced block, its lines dedented as the fence is."""
    blocks, fence, indent, body = [], None, "", []
    for line in text.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence, indent, body = stripped[3:].strip(), line[: len(line) - len(line.lstrip())], []
        elif fence is not None and stripped.startswith("```"):
            blocks.append((fence, body))
            fence = None
        elif fence is not None:
            body.append(line.removeprefix(indent))
    return blocks


def commands_in(path: Path) -> list[list[str]]:
    """The shell commands of ``path``'s command blocks: a ``$ `` prompt and ``# `` comments
    dropped, continued lines joined, each split as the shell splits it."""
    commands = []
    for fence, lines in code_blocks(path.read_text()):
        if fence not in COMMAND_FENCES:
            continue
        joined = "\n".join(lines).replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line).strip().removeprefix("$ ")
            if line and not line.startswith("["):  # a TOML block's table header
                commands.append(shlex.split(line))
    return commands


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", ROOT.joinpath("Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_parses_and_every_file_it_names_exists(page: Path) -> None:
    parser = build_parser()
    for words in commands_in(page):
        if words[:3] == ["python", "-m", "aihpc"]:
            words = ["aihpc", *words[3:]]
        if words[0] == "aihpc" or words[0].endswith("/bin/aihpc"):
            try:
                parser.parse_args(words[1:])
            except SystemExit as exc:
                pytest.fail(f"{page.name}: `{shlex.join(words)}` does not parse (exit {exc.code})")
        elif words[0] == "make":
            targets = [w for w in words[1:] if "=" not in w]
            assert set(targets) <= make_targets(), f"{page.name}: `{shlex.join(words)}`"
        paths = [w for w in words if REPO_PATH.match(w) and "/data/" not in w]
        missing = [p for p in paths if not (ROOT / p).exists()]
        assert not missing, f"{page.name}: `{shlex.join(words)}` names {missing}, not in the repo"


def test_the_configuration_reference_names_every_setting_and_flag() -> None:
    page = (DOCS / "reference" / "configuration.md").read_text()
    run = argparse.ArgumentParser()
    run_cli.add_arguments(run)
    flags = {s for a in run._actions for s in a.option_strings if s.startswith("--")}
    missing = sorted(name for name in settings() if f"`{name}`" not in page)
    missing += sorted(flag for flag in flags - {"--help"} if f"`{flag}" not in page)
    assert not missing, f"docs/reference/configuration.md lacks {missing}"


def test_every_measurement_page_is_dated_and_listed_in_the_index() -> None:
    index = (MEASUREMENTS / "index.md").read_text()
    pages = sorted(p.name for p in MEASUREMENTS.glob("*.md") if p.name != "index.md")
    assert pages
    undated = [p for p in pages if not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", p)]
    assert not undated, f"measurement pages are named YYYY-MM-DD-subject.md: {undated}"
    unlisted = [p for p in pages if f"]({p})" not in index]
    assert not unlisted, f"docs/measurements/index.md does not list {unlisted}"
