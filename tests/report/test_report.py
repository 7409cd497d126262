"""Tests of the HTML run report (aihpc.report) and `aihpc report`."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aihpc.base.errors import DataError
from aihpc.base.fmt import format_fraction, format_seconds, format_si
from aihpc.cli import main
from aihpc.report import write_report
from aihpc.report.digest import ReportRun, read_for_report
from aihpc.report.html import render_html
from aihpc.report.plots import phase_totals, plot_timeline, tick_label, trial_spans
from aihpc.results.read import decode_results
from aihpc.results.read import read_results_document as load_results
from aihpc.results.trial import EpochRecord

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMG_RE = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def _report_run(doc: dict[str, Any]) -> ReportRun:
    """The run of the results.json document ``doc``, as the report reads it."""
    results = decode_results(json.dumps(doc).encode(), "a test's results")
    return ReportRun.of(results.head(), results.trials)


def _run_dir(tmp_path: Path, results: dict[str, Any] | None = None) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if results is None:
        shutil.copy(FIXTURE, run_dir / "results.json")
    else:
        (run_dir / "results.json").write_text(json.dumps(results))
    return run_dir


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (4.12e10, "OPS", "41.2 GOPS"),
        (4050472109.5, "OPS", "4.05 GOPS"),
        (512, "OPS", "512 OPS"),
        (999.96e9, "OPS", "1.00 TOPS"),
        (2.1e11, "", "210 G"),
        (1.1e11, "FLOP/s", "110 GFLOP/s"),
        (0, "OPS", "0 OPS"),
        (-4.12e10, "OPS", "-41.2 GOPS"),
        (None, "OPS", "n/a"),
        (float("nan"), "OPS", "n/a"),
        ("12", "OPS", "n/a"),
    ],
)
def test_format_si(value: Any, unit: str, expected: str) -> None:
    assert format_si(value, unit) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (42.34, "42.3 s"),
        (120.4, "2 min 00 s"),
        (300.6, "5 min 01 s"),
        (3723, "1 h 02 min 03 s"),
        (None, "n/a"),
    ],
)
def test_format_seconds(seconds: Any, expected: str) -> None:
    assert format_seconds(seconds) == expected


def test_format_fraction_and_ticks() -> None:
    assert format_fraction(0.0368) == "3.7%"
    assert format_fraction(0.9722, 2) == "97.22%"
    assert tick_label(5e9, "OPS") == "5 GOPS"
    assert tick_label(2.5e9, "OPS") == "2.5 GOPS"
    assert tick_label(1e10, "") == "10 G"


# --------------------------------------------------------------------------- the fixture report


def test_report_from_fixture(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    page = path.read_text(encoding="utf-8")

    # Header: score 4.0504721095e9 ops/s, regulated 1.45117e10, error 2.78 %, accuracy 0.9722,
    # peak share 0.0368 of 1.1e11 FLOP/s, wall 120.4 s.
    for text in (
        "4.05 GOPS",
        "14.5 GOPS",
        "2.78%",
        "97.22%",
        "3.7%",
        "110 GFLOP/s",
        "2 min 00 s",
        ">valid<",
        "6 completed, 1 failed, 1 diverged",
    ):
        assert text in page, text
    # Schema 1's peak, one per dtype, is what the share of peak divided by.
    peak = page[page.index("<h2>Measured peak</h2>") : page.index("<h2>Energy</h2>")]
    assert "<tr><th>float32 on cpu</th><td>110 GFLOP/s</td></tr>" in peak
    # Environment and configuration.
    for text in (
        "bench-node-07",
        "AMD EPYC 7763 64-Core Processor",
        "2.13.0+cpu",
        "e1dd67c0b5a4f2d9c3e8a7b6f5d4c3b2a1908f7e (dirty)",
        "morph-evolution",
    ):
        assert text in page, text

    # One embedded PNG per plot (four plots and the lineage), each a real PNG of a sensible size.
    images = IMG_RE.findall(page)
    assert len(images) == 5
    assert page.count("<img ") == 5
    for encoded in images:
        width, height = _png_size(base64.b64decode(encoded))
        assert 400 <= width <= 2000 and 150 <= height <= 1500, (width, height)

    # Self-contained: no external references, no scripts.
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower() and "<link" not in page.lower()

    # Trials table sorted by id, with the failed trial's reason and the diverged status.
    table = page[page.index("<h2>Trials</h2>") :]
    ids = [int(i) for i in re.findall(r'<tr><td class="num">(\d+)</td>', table)]
    assert ids == list(range(8))
    assert "out of memory: tried to allocate 1.50 GiB" in table
    assert 'class="status st-diverged"' in table
    # Best trial: id 7 (0.9722), reached by seed 0 -> 1 -> 3 -> 7, 10 layers, 28522 parameters.
    best = page[page.index("<h2>Best trial</h2>") : page.index("<h2>Trials</h2>")]
    assert "0 → 1 → 3 → 7" in best
    assert "<th>layers</th><td>10</td>" in best
    assert "28.5 k (28522)" in best
    assert "conv × 2, bn × 2, relu × 3, global_avgpool × 1, dense × 2" in best
    assert _fixture()["trials"][7]["arch_hash"] in best


def test_schema_version_1_reads_as_version_3(tmp_path: Path) -> None:
    current = _fixture()
    current["schema_version"] = 3
    for trial in current["trials"]:
        trial["num_params"] = trial.pop("params")
    # version 1 recorded one peak per dtype, read as peak_by_dtype (the run's workers' peak none)
    current["peak_by_dtype"], current["peak"] = current["peak"], None
    assert load_results(FIXTURE) == current  # version 1 called the parameter count "params"


def test_best_trial_and_phase_totals() -> None:
    results = _fixture()
    run = read_for_report(FIXTURE)
    assert run.best_trial().id == 7
    totals = phase_totals(run.trials)
    assert list(totals)[:7] == [
        "data",
        "forward",
        "backward",
        "optimizer",
        "eval",
        "compile",
        "other",
    ]
    assert totals["compile"] == 0.0  # an old results file: no compile phase
    # Trial 6 (failed) spent exactly 0.05 s loading data; the sum over all trials matches by hand.
    expected_data = 0.0
    for trial in results["trials"]:
        expected_data += trial["phase_seconds"]["data"]
    assert totals["data"] == pytest.approx(expected_data)
    assert sum(totals.values()) == pytest.approx(
        sum(sum(t["phase_seconds"].values()) for t in results["trials"])
    )


def test_report_to_out_path(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    out = tmp_path / "elsewhere.html"
    assert write_report(run_dir, out) == out
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert not (run_dir / "report.html").exists()


def test_text_from_results_is_escaped(tmp_path: Path) -> None:
    results = _fixture()
    results["trials"][5]["reason"] = "<script>alert('x')</script>"
    results["trials"][2]["morph"] = 'widen "conv2" <b>&</b>'
    results["environment"]["hostname"] = "<img src=x onerror=alert(1)>"
    results["score"]["valid"] = False
    results["score"]["invalid_reason"] = "best accuracy <script> below 0.5"
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "widen &quot;conv2&quot; &lt;b&gt;&amp;&lt;/b&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "INVALID" in page and "best accuracy &lt;script&gt; below 0.5" in page
    assert page.count("<img ") == 5  # only the plots are images


# --------------------------------------------------------------------------- edge cases


def test_zero_trials_and_empty_sections(tmp_path: Path) -> None:
    results = _fixture()
    results["trials"] = []
    results["timeline"] = []
    results["workers"] = []
    results["peak"] = None
    for key in ("peak_flops_per_s", "peak_fraction"):
        results["score"][key] = None
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert "<img " not in page
    assert page.count("no data for this plot") == 4
    assert page.count("no trials ran") == 2  # the lineage and the trials table
    assert "no peak measured" in page
    assert "4.05 GOPS" in page


def test_a_document_without_its_sections_is_refused_naming_the_first(tmp_path: Path) -> None:
    with pytest.raises(DataError) as exc:
        write_report(_run_dir(tmp_path, {"schema_version": 1}))
    assert _assert_one_line(exc).endswith(": object missing required field aihpc_version")


def test_trials_with_missing_optional_fields(tmp_path: Path) -> None:
    results = _fixture()
    bare = {
        **{k: results["trials"][7][k] for k in ("arch_hash", "morph", "hparams")},
        **{"id": 8, "parent": 7, "status": "failed", "reason": "worker lost", "epochs": []},
        **{"num_params": None, "attempts": 1, "worker": None, "t_start": None, "t_end": None},
        **{"ops": {"train": 0, "eval": 0, "total": 0}, "ops_per_sample": None},
        "phase_seconds": {},
    }
    results["trials"].append(bare)  # no times, ops, phases, arch
    results["trials"][6]["phase_seconds"] = {}
    results["trials"][0]["epochs"] = []
    point = {"t": 10.0, "ops": 0, "ops_per_second": 0.0, "trials_done": 0, "running": 0}
    results["timeline"] = [{**point, "best_accuracy": None}]
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert len(IMG_RE.findall(page)) == 5
    table = page[page.index("<h2>Trials</h2>") :]
    assert "worker lost" in table
    assert re.findall(r'<tr><td class="num">(\d+)</td>', table)[-1] == "8"


def test_a_run_without_an_id_or_version_says_not_available() -> None:
    page = render_html(_report_run({**_fixture(), "run_id": None, "aihpc_version": None}), {})
    assert "<title>aihpc report</title>" in page
    assert '<p class="sub">run <code>n/a</code> · aihpc n/a</p>' in page


def test_timeline_without_accuracy_still_plots() -> None:
    point = {"ops": 0, "trials_done": 0, "running": 1}
    timeline = [
        {**point, "t": 5.0, "ops_per_second": 1e9},
        {**point, "t": 10.0, "ops_per_second": 2e9},
    ]
    png = plot_timeline(_report_run({**_fixture(), "timeline": timeline}))
    assert png is not None and png[:8] == PNG_SIGNATURE
    assert plot_timeline(_report_run({**_fixture(), "timeline": []})) is None


# --------------------------------------------------------------------------- errors


def _assert_one_line(exc: pytest.ExceptionInfo[DataError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_missing_results_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    with pytest.raises(DataError) as exc:
        write_report(run_dir)
    assert str(run_dir / "results.json") in _assert_one_line(exc)


def test_missing_run_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="run directory or result file not found"):
        write_report(tmp_path / "nope")


def test_invalid_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text('{"schema_version": 1,\n "score": {')
    with pytest.raises(DataError) as exc:
        load_results(run_dir / "results.json")
    message = _assert_one_line(exc)
    assert "not valid JSON" in message and str(run_dir / "results.json") in message


@pytest.mark.parametrize("version", [4, 0, "1", None, True])
def test_unsupported_schema_version(tmp_path: Path, version: Any) -> None:
    results = _fixture()
    results["schema_version"] = version
    with pytest.raises(DataError) as exc:
        write_report(_run_dir(tmp_path, results))
    assert f"schema_version {version!r}" in _assert_one_line(exc)


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"trials": {"0": {}}}, ": trials: expected array, got object"),
        ({"score": [1]}, ": score: expected object, got array"),
        ({"trials": [3]}, ": trials[0]: expected object, got int"),
    ],
)
def test_wrong_section_types(tmp_path: Path, patch: dict[str, Any], fragment: str) -> None:
    results = {**_fixture(), **patch}
    with pytest.raises(DataError) as exc:
        write_report(_run_dir(tmp_path, results))
    assert fragment in _assert_one_line(exc)


def test_top_level_not_an_object(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="results.json: expected object, got array$"):
        write_report(run_dir)


# --------------------------------------------------------------------------- CLI


def test_cli_writes_and_prints_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run_dir(tmp_path)
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.html")
    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert "4.05 GOPS" in out.read_text()


def test_cli_missing_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "run directory or result file not found" in err and "nope" in err
    )


def test_cli_bad_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _fixture()
    results["schema_version"] = 99
    assert main(["report", str(_run_dir(tmp_path, results))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "schema_version 99" in err


def test_cli_import_is_lazy() -> None:
    code = (
        "import sys, aihpc.cli.report, aihpc.report\n"
        "bad = [m for m in ('matplotlib', 'torch', 'numpy') if m in sys.modules]\n"
        "import aihpc.cli; aihpc.cli.build_parser()\n"
        "bad += ['matplotlib (after build_parser)'] if 'matplotlib' in sys.modules else []\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_trial_spans_follow_epoch_workers() -> None:
    # Epochs 1-2 on worker-0, epoch 3 resumed on worker-1 after the master restarted.
    epochs = (
        EpochRecord(epoch=1, worker="worker-0", t_start=10.0, t_end=14.0),
        EpochRecord(epoch=2, worker="worker-0", t_start=14.5, t_end=18.0),
        EpochRecord(epoch=3, worker="worker-1", t_start=40.0, t_end=43.0),
    )
    trial = msgspec.structs.replace(
        read_for_report(FIXTURE).trials[1], worker="worker-0", t_start=10.0, t_end=43.0
    )
    spanned = msgspec.structs.replace(trial, epochs=epochs)
    assert trial_spans(spanned) == [("worker-0", 10.0, 18.0), ("worker-1", 40.0, 43.0)]
    # Epochs without times fall back to the trial's own span; reversed times are dropped.
    untimed = msgspec.structs.replace(trial, epochs=(EpochRecord(epoch=1),))
    assert trial_spans(untimed) == [("worker-0", 10.0, 43.0)]
    reversed_ = msgspec.structs.replace(untimed, worker="w", t_start=5.0, t_end=4.0)
    assert trial_spans(reversed_) == []


def test_worker_plot_with_restart_segments(tmp_path: Path) -> None:
    results = _fixture()
    results["segments"] = [{"t_start": 0.0, "t_end": 50.0}, {"t_start": 58.0, "t_end": 120.4}]
    results["trials"][3]["epochs"][0].update(worker="worker-1", t_start=27.6, t_end=31.0)
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert len(IMG_RE.findall(page)) == 5
    results["segments"] = {"t_start": 0.0}
    with pytest.raises(DataError, match="segments: expected array | null, got object"):
        (tmp_path / "b").mkdir()
        load_results(_run_dir(tmp_path / "b", results) / "results.json")


def _total_peak(results: dict[str, Any], per_worker_flops: list[float]) -> dict[str, Any]:
    """``results`` with a peak measured the way ``aihpc run`` does: every worker at once, summed."""
    per_worker = [
        {"device": "cpu", "dtype": "float32", "flops_per_s": f, "spread": 0.02}
        for f in per_worker_flops
    ]
    results["peak"] = {
        "device": "cpu",
        "dtype": "float32",
        "workers": len(per_worker),
        "per_worker": per_worker,
        "total_flops_per_s": sum(per_worker_flops),
        "spread": 0.02,
    }
    return results


def test_peak_section_shows_the_total_the_share_uses_and_its_drift(tmp_path: Path) -> None:
    results = _total_peak(_fixture(), [55e9, 55e9])  # the fixture's score used 110e9 FLOP/s
    results["peak"].update(
        after=_total_peak({}, [45e9, 45e9])["peak"],
        drift=-0.1818,
        drift_warning="the machine's peak changed by -18.2 % during the run",
    )
    page = write_report(_run_dir(tmp_path, results)).read_text()
    section = page[page.index("<h2>Measured peak</h2>") : page.index("<h2>Configuration</h2>")]
    assert (
        "<tr><th>total: float32 on cpu, 2 workers at once, before the run"
        " (the share of peak uses this)"
        "</th><td>110 GFLOP/s</td></tr>"
    ) in section
    assert (
        section.count("<tr><th>worker 1 of 2, part of the total</th><td>55.0 GFLOP/s</td></tr>")
        == 1
    )
    assert "<tr><th>worker 2 of 2, part of the total</th><td>55.0 GFLOP/s</td></tr>" in section
    # 4050472109.5 OPS / 110e9 FLOP/s = 0.03682 (the fixture's peak_fraction 0.0368).
    assert (
        "<tr><th>share of the measured peak</th><td>4.05 GOPS ÷ 110 GFLOP/s = 3.7%</td></tr>"
        in section
    )
    assert (
        "<tr><th>total after the run</th><td>90.0 GFLOP/s</td></tr>" in section
        and "-18.2%" in section
    )
    assert "the machine&#x27;s peak changed by -18.2 % during the run" in section
    assert "used" not in section  # the score used the total: no warning
    header = page[: page.index("<h2>Environment</h2>")]
    assert "of 110 GFLOP/s, the total measured peak of 2 workers at once" in header


def test_peak_section_says_which_workers_the_drift_compares_after_a_lost_one(
    tmp_path: Path,
) -> None:
    results = _total_peak(_fixture(), [55e9, 55e9])
    results["peak"].update(
        after=_total_peak({}, [56e9])["peak"],
        drift=56 / 55 - 1,
        drift_workers=["0"],
        drift_warning=None,
    )
    page = write_report(_run_dir(tmp_path, results)).read_text()
    section = page[page.index("<h2>Measured peak</h2>") : page.index("<h2>Configuration</h2>")]
    assert "<tr><th>total after the run, on the 1 worker(s) left</th><td>56.0 GFLOP/s" in section
    assert "<tr><th>drift of worker(s) 0, each against its own</th><td>1.8%" in section


def test_peak_section_warns_when_the_share_used_another_peak(tmp_path: Path) -> None:
    results = _total_peak(_fixture(), [55e9, 55e9])
    results["score"]["peak_flops_per_s"] = 55e9  # one worker's peak: not what the share should use
    results["score"]["peak_fraction"] = 4050472109.5 / 55e9
    page = write_report(_run_dir(tmp_path, results)).read_text()
    section = page[page.index("<h2>Measured peak</h2>") : page.index("<h2>Configuration</h2>")]
    assert "4.05 GOPS ÷ 55.0 GFLOP/s = 7.4%" in section
    assert (
        "the score&#x27;s share of peak used 55.0 GFLOP/s, not the measured total 110 GFLOP/s"
        in section
    )


def test_peak_section_of_many_workers_shows_min_median_max(tmp_path: Path) -> None:
    flops = [
        float(f) * 1e9 for f in (90, 10, 80, 20, 70, 30, 60, 40, 50)
    ]  # median 50e9, total 450e9
    results = _total_peak(_fixture(), flops)
    page = write_report(_run_dir(tmp_path, results)).read_text()
    section = page[page.index("<h2>Measured peak</h2>") : page.index("<h2>Configuration</h2>")]
    assert "9 workers at once" in section and "<td>450 GFLOP/s</td>" in section
    assert (
        "<tr><th>per worker, 9 workers (min / median / max)</th>"
        "<td>10.0 GFLOP/s / 50.0 GFLOP/s / 90.0 GFLOP/s</td></tr>"
    ) in section
    assert "part of the total" not in section


def test_energy_card_and_section_show_gops_per_watt_or_why_not(tmp_path: Path) -> None:
    from aihpc.energy.meter import DeviceEnergy
    from aihpc.energy.run import unmeasured_block
    from aihpc.records.energy import energy_results

    results = _fixture()
    block = {
        "complete": True,
        "reason": None,
        "interval_s": 0.5,
        "devices": [
            {
                "device": "GPU 00000000:19:00.0 (NVIDIA H100)",
                "host": "gpu1",
                "source": "nvml",
                "joules": 36000.0,
                "seconds": 120.0,
                "watts": 300.0,
                "samples": 241,
                "max_interval_s": 0.52,
                "wraps": 0,
                "resets": 0,
                "reason": None,
            },
            DeviceEnergy.unmeasured(
                "CPU packages", "gpu1", "rapl", "no RAPL: /x does not exist"
            ).to_dict(),
        ],
    }
    # the fixture's 4.877e11 operations over 36 kJ: 1.355e7 operations per joule, 0.0135 GOPS/W
    results["energy"] = energy_results(block, results["score"]["ops"])
    page = write_report(_run_dir(tmp_path, results)).read_text()
    header = page[: page.index("<h2>Environment</h2>")]
    gops = results["score"]["ops"] / 36000.0 / 1e9
    assert (
        f'<div class="value ">{gops:.3g}</div>' in header and "36.0 kJ at 300 W average" in header
    )
    section = page[page.index("<h2>Energy</h2>") : page.index("<h2>Configuration</h2>")]
    assert (
        "gpu1 GPU 00000000:19:00.0 (NVIDIA H100) (nvml)</th><td>36.0 kJ, 300 W average, 241 samples"
        in section
    )
    assert (
        "<th>gpu1 CPU packages (rapl)</th><td>not measured: no RAPL: /x does not exist</td>"
        in section
    )
    assert f"= {gops:.3g} GOPS/W" in section

    results["energy"] = energy_results(
        unmeasured_block("no RAPL: /sys/class/powercap does not exist"), 1.0
    )
    (tmp_path / "none").mkdir()
    page = write_report(_run_dir(tmp_path / "none", results)).read_text()
    assert "not measured: no RAPL: /sys/class/powercap does not exist" in page
    (tmp_path / "old").mkdir()
    old = write_report(_run_dir(tmp_path / "old")).read_text()  # results_v1.json: no energy key
    assert "energy not measured: results written before aihpc measured energy" in old
