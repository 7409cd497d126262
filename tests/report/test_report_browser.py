"""The HTML report in a real browser: headless Chromium renders `aihpc report` output.

Chromium parses the page (``--dump-dom``: the DOM after parsing, where the
browser adds the ``<tbody>`` the page leaves out) and paints it
(``--screenshot``); the tests check that the plots, tables, the total peak and
the lineage are in the DOM, and that the painted page is not blank, by the
same measure that a blank page fails.  Debian's ``chromium`` is installed by
``make test`` (scripts/install-browser.sh) when it can be; where it is
missing, or cannot render here, the tests skip, saying why.
``AIHPC_CHROMIUM`` names another binary.

Each browser runs in a process group of its own, with a time limit, and the
whole group is killed when it ends, so no helper process outlives the test.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageStat

from aihpc.cli import main

# one process runs the module under pytest-xdist: its fixture (the rendered page) is made once
pytestmark = pytest.mark.xdist_group("report-browser")

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_TIMEOUT = 90  # seconds a browser run may take on a busy machine
WINDOW = (1200, 5600)  # tall enough for the whole fixture report (about 4960 px)
#: Colours only the plots paint, not the page's text
#: (phases: data, optimizer; lineage: the best's star).
PLOT_COLOURS = ("#8e24aa", "#fdd835")
_GROUPS: list[int] = []  # process groups of the browsers started, checked for leftovers


def _browser_binary() -> tuple[str | None, str]:
    """(the browser to use or None, why there is none)."""
    named = os.environ.get("AIHPC_CHROMIUM")
    if named:
        return shutil.which(named), f"AIHPC_CHROMIUM={named} is not an executable on PATH"
    found = next((path for path in map(shutil.which, BROWSER_NAMES) if path), None)
    return found, (
        f"none of {', '.join(BROWSER_NAMES)} is on PATH (apt-get install chromium, which "
        "`make test` runs as root; or set AIHPC_CHROMIUM)"
    )


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once; its process group is killed however it ends.

    Output goes to files, not pipes: a helper left running would hold a pipe open.
    """
    command = [
        binary,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        *args,
    ]
    profile.mkdir(parents=True, exist_ok=True)
    out_path, err_path = profile / "stdout.txt", profile / "stderr.txt"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
    _GROUPS.append(proc.pid)
    try:
        proc.wait(timeout=BROWSER_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{binary} did not finish within {BROWSER_TIMEOUT} s: {' '.join(args)}")
    finally:
        _kill_group(
            proc.pid
        )  # the browser if it hangs, and helpers (zygote, crash handler) that outlive it
        proc.wait()
    return subprocess.CompletedProcess(
        command,
        proc.returncode,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
    )


def _screenshot(binary: str, profile: Path, page: Path, out: Path) -> Path:
    result = _browser(
        binary,
        profile,
        f"--screenshot={out}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        page.as_uri(),
    )
    if result.returncode != 0 or not out.exists():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"exit {result.returncode}, no screenshot ({last})")
    return out


def _near(rgb: tuple[int, ...], hex_colour: str, tolerance: int = 6) -> bool:
    return all(
        abs(a - int(hex_colour[i : i + 2], 16)) <= tolerance
        for a, i in zip(rgb, (1, 3, 5), strict=True)
    )


def screenshot_figures(path: Path) -> dict[str, Any]:
    """What a screenshot shows: its size, distinct colours, luminance spread, the share of pixels
    painted over the background (the commonest colour), the lowest painted row, and the pixels
    of each of the plots' own colours."""
    image = Image.open(path).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24)
    background = max(colours)[1]
    plot_pixels = {c: sum(n for n, rgb in colours if _near(rgb, c)) for c in PLOT_COLOURS}
    painted = sum(
        n for n, rgb in colours if max(abs(a - b) for a, b in zip(rgb, background, strict=True)) > 8
    )
    mask = Image.eval(image.convert("L"), lambda v: 255 if abs(v - sum(background) / 3) > 8 else 0)
    box = mask.getbbox()
    return {
        "size": image.size,
        "distinct_colours": len(colours),
        "luminance_stddev": ImageStat.Stat(image.convert("L")).stddev[0],
        "painted_fraction": painted / (image.size[0] * image.size[1]),
        "painted_to_row": box[3] if box else 0,
        "plot_colour_pixels": plot_pixels,
    }


def not_blank(figures: dict[str, Any]) -> bool:
    """A page with text, tables and plots: many colours, contrast, and paint down the page."""
    return (
        figures["distinct_colours"] >= 500
        and figures["luminance_stddev"] >= 10
        and figures["painted_fraction"] >= 0.03
        and figures["painted_to_row"] >= 3000
    )


class _Dom(HTMLParser):
    """The parts of a report's DOM the test checks, by ``<h2>`` section."""

    def __init__(self) -> None:
        super().__init__()
        self.section = ""
        self.in_h2 = False
        self.text: dict[str, list[str]] = {}
        self.images: list[tuple[str, str]] = []
        self.tables: list[tuple[str, int]] = []
        self._rows: list[int] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "h2":
            self.in_h2, self.section = True, ""
        elif tag == "img":
            self.images.append((self.section, dict(attrs).get("src") or ""))
        elif tag == "table":
            self._rows.append(0)
        elif tag == "tr" and self._rows:
            self._rows[-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self.in_h2 = False
        elif tag == "table" and self._rows:
            self.tables.append((self.section, self._rows.pop()))

    def handle_data(self, data: str) -> None:
        if self.in_h2:
            self.section += data
        else:
            self.text.setdefault(self.section, []).append(data)

    def section_text(self, title: str) -> str:
        return " ".join(" ".join(self.text.get(title, [])).split())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fixture run's report, written by `aihpc report`, parsed and painted by Chromium."""
    binary, missing = _browser_binary()
    if binary is None:
        pytest.skip(f"no Chromium to render the report: {missing}")
    tmp = tmp_path_factory.mktemp("browser")
    blank = tmp / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    try:  # the blank page doubles as the probe of whether this browser renders here at all
        blank_png = _screenshot(binary, tmp / "profile", blank, tmp / "blank.png")
    except RuntimeError as exc:
        pytest.skip(f"{binary} cannot render headless here: {exc}")
    results = json.loads(FIXTURE.read_text())
    per_worker = [{"device": "cpu", "dtype": "float32", "flops_per_s": 55e9, "spread": 0.02}] * 2
    results["peak"] = {
        "device": "cpu",
        "dtype": "float32",
        "workers": 2,
        "per_worker": per_worker,
        "total_flops_per_s": 110e9,
        "spread": 0.02,
    }
    run_dir = tmp / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(results))
    assert main(["report", str(run_dir)]) == 0
    page = run_dir / "report.html"
    dumped = _browser(binary, tmp / "profile", "--dump-dom", page.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    shot = _screenshot(binary, tmp / "profile", page, tmp / "report.png")
    return {
        "source": page.read_text(),
        "dump": dumped.stdout,
        "dom": dom,
        "shot": screenshot_figures(shot),
        "blank": screenshot_figures(blank_png),
    }


@pytest.mark.slow  # three browser runs and a report: several seconds
def test_the_dom_has_the_plots_tables_peak_and_lineage(rendered: dict[str, Any]) -> None:
    dom = rendered["dom"]
    # The browser's own DOM, not the file: Chromium adds the <tbody> that the page leaves out.
    assert "<tbody>" not in rendered["source"] and dom.tags.get("tbody", 0) == dom.tags["table"]
    # Every image is a plot: a data: URI holding a PNG that decodes, in the section it belongs to.
    sections = [section for section, _ in dom.images]
    assert sections == [
        "Score and accuracy over time",
        "Operations per trial",
        "Worker timeline",
        "Phase breakdown",
        "Search lineage",
    ]
    for _, src in dom.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        image = Image.open(io.BytesIO(base64.b64decode(src[len(prefix) :], validate=True)))
        assert (
            image.format == "PNG"
            and image.size[0] >= 400
            and len(image.convert("RGB").getcolors(1 << 24)) > 50
        )
    tables = dict(dom.tables[::-1])  # section -> rows of its first table
    assert tables["Trials"] == 9  # a header and the 8 trials
    assert [rows for section, rows in dom.tables if section == "Search lineage"] == [
        5
    ]  # header + 0, 1, 3, 7
    assert (
        tables["Measured peak"] == 6 and tables["Environment"] >= 5 and tables["Configuration"] >= 5
    )
    peak = dom.section_text("Measured peak")
    assert (
        "total: float32 on cpu, 2 workers at once, before the run"
        " (the share of peak uses this) 110 GFLOP/s" in peak
    )
    assert "share of the measured peak 4.05 GOPS ÷ 110 GFLOP/s = 3.7%" in peak
    lineage = dom.section_text("Search lineage")
    assert "Ancestry of the best trial" in lineage and "#7 ★" in lineage
    assert "branch from #2: 3 trials, best 96.70% (#4)" in lineage
    assert dom.tags["details"] == 3 and dom.tags["li"] == 8


@pytest.mark.slow  # three browser runs and a report: several seconds
def test_the_screenshot_is_not_blank(rendered: dict[str, Any]) -> None:
    shot, blank = rendered["shot"], rendered["blank"]
    assert shot["size"] == WINDOW and blank["size"] == WINDOW
    assert not_blank(shot), shot
    # The plots were decoded and painted: their own colours are on the screen.
    # (With the images' data broken, the same page shows none of them: 0 pixels of either.)
    assert all(n >= 1000 for n in shot["plot_colour_pixels"].values()), shot
    assert not not_blank(blank) and blank["distinct_colours"] == 1, blank  # the measure can tell


@pytest.mark.slow  # three browser runs and a report: several seconds
def test_no_browser_process_outlives_its_run(rendered: dict[str, Any]) -> None:
    assert len(_GROUPS) >= 3
    proc = Path("/proc")
    if not proc.is_dir():
        pytest.skip("no /proc to list processes")
    left = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            pgid = int(stat.read_text().rsplit(")", 1)[1].split()[2])
        except OSError:
            continue  # the process ended while listed
        if pgid in _GROUPS and not _ends(int(stat.parent.name)):
            left.append(stat.parent.name)
    assert not left, f"browser processes left running: {left}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and waiting for init to reap it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ends(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` stops running within ``within`` seconds (a SIGKILL takes a moment)."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="no /proc to see processes")
def test_a_browser_s_helpers_are_killed_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in "browser" that leaves a helper running, as Chromium's zygote may.
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path}/helper\n")
    fake.chmod(0o755)
    assert _browser(str(fake), tmp_path / "p").returncode == 0
    assert _ends(int((tmp_path / "helper").read_text()))
    # One that hangs is stopped at the time limit, with its helper.
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path}/helper\nwait\n")
    monkeypatch.setattr(sys.modules[__name__], "BROWSER_TIMEOUT", 1)
    with pytest.raises(pytest.fail.Exception, match="did not finish within 1 s"):
        _browser(str(fake), tmp_path / "p")
    assert _ends(int((tmp_path / "helper").read_text()))
