"""The report's sections on the machine (aihpc.report.machine): the processor, the measured peak's
kernel search, the nominal peak, the shares of both, and the configuration resolved at run time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aihpc.report import write_report

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"

CPU = {
    "vendor": "AuthenticAMD",
    "family": 26,
    "model": 2,
    "stepping": 1,
    "model_name": "AMD EPYC 9555",
    "extensions": ["avx2", "avx512_bf16", "avx512f", "fma"],
    "sockets": 1,
    "cores": 2,
    "threads_per_core": 1,
    "logical_cpus": 2,
    "caches": [
        {"level": 1, "kind": "data", "size_bytes": 49152, "shared_by": 1},
        {"level": 3, "kind": "unified", "size_bytes": 33554432, "shared_by": 2},
    ],
    "clock_mhz": 3200.0,
    "max_clock_mhz": None,
    "clock_source": "cpu MHz of /proc/cpuinfo",
    "hypervisor": True,
    "blas": "mkl 2024.2",
    "onednn_version": "3.12.0",
    "onednn_isa": "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions",
    "torch_cpu_capability": "AVX512",
}


def _part(nominal: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "device": "cpu",
        "dtype": "float32",
        "kernel": "conv3x3 128ch 8x8 batch 32",
        "flops_per_s": 55e9,
        "min_flops_per_s": 55e9,
        "max_flops_per_s": 55e9,
        "spread": 0.01,
        "repeats": [55e9],
        "calls_per_repeat": 3,
        "flops_per_call": 10**9,
        "threads": 1,
        "note": None,
        "warning": None,
        "candidates": [
            {"kernel": "matmul 1024x1024", "flops_per_s": 25e9},
            {"kernel": "conv3x3 128ch 8x8 batch 32", "flops_per_s": 54e9},
        ],
        "nominal": nominal,
    }


def _results(
    ops_per_second: float = 4050472109.5, nominal: float | None = 204.8e9
) -> dict[str, Any]:
    """The v1 fixture with a peak of two workers found by the kernel search, a nominal peak, and
    the processor recorded."""
    from aihpc.scoring.peak import PeakResult, RunPeak, WorkerPeak

    results = json.loads(FIXTURE.read_text())
    each = None if nominal is None else nominal / 2
    record = {
        "dtype": "float32",
        "flops_per_s": each,
        "derivation": "1 cores x 16 float32 lanes (AVX-512) x 2 FMA units x 2 FLOP x 3.20 GHz",
        "note": None if each else "no clock reported",
    }
    peak = RunPeak.of(
        [WorkerPeak.of(f"w{i}", [PeakResult.from_dict(_part(record))]) for i in range(2)], 1
    )
    results["peak"] = peak.to_dict()
    results["environment"]["cpu"] = CPU
    results["score"].update(
        ops_per_second=ops_per_second,
        peak_flops_per_s=110e9,
        peak_fraction=ops_per_second / 110e9,
        nominal_peak_flops_per_s=nominal,
        nominal_peak_fraction=ops_per_second / nominal if nominal else None,
        peak_warning="the score is 104.0 % of the measured peak"
        if ops_per_second > 110e9
        else None,
    )
    results["config"].update(workers=None, threads_per_worker=None)
    results["layout"] = {"workers": 2, "threads": 1, "device": "cpu"}
    return results


def _page(tmp_path: Path, results: dict[str, Any]) -> str:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(results))
    return write_report(run_dir).read_text()


def _between(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end)]


def test_the_peak_section_names_the_kernel_the_search_and_the_nominal_peak(tmp_path: Path) -> None:
    page = _page(tmp_path, _results())
    section = _between(page, "<h2>Measured peak</h2>", "<h2>Configuration</h2>")
    assert "<tr><th>fastest kernel</th><td>conv3x3 128ch 8x8 batch 32</td></tr>" in section
    assert (
        "<tr><th>worker 1 of 2, part of the total</th><td>55.0 GFLOP/s; "
        "searched: conv3x3 128ch 8x8 batch 32 "
        "54.0 GFLOP/s, matmul 1024x1024 25.0 GFLOP/s</td></tr>"
    ) in section
    assert (
        "<tr><th>nominal peak (the hardware&#x27;s figures)</th>"
        "<td>205 GFLOP/s = 2 x (1 cores x 16 "
        "float32 lanes (AVX-512) x 2 FMA units x 2 FLOP x 3.20 GHz)</td></tr>"
    ) in section
    assert (
        "<tr><th>share of the measured peak</th><td>4.05 GOPS ÷ 110 GFLOP/s = 3.7%</td></tr>"
        in section
    )
    assert (
        "<tr><th>share of the nominal peak (model FLOPs utilisation)</th>"
        "<td>4.05 GOPS ÷ 205 GFLOP/s = 2.0%"
        "</td></tr>"
    ) in section
    header = page[: page.index("<h2>Environment</h2>")]
    assert "2.0% of the nominal 205 GFLOP/s" in header and "unreliable" not in header


def test_a_share_above_100_percent_is_flagged_on_the_card_and_in_the_section(
    tmp_path: Path,
) -> None:
    page = _page(tmp_path, _results(ops_per_second=114.4e9, nominal=None))
    header = page[: page.index("<h2>Environment</h2>")]
    assert "104.0%" in header and "above 100 %: the measured peak is unreliable" in header
    section = _between(page, "<h2>Measured peak</h2>", "<h2>Configuration</h2>")
    assert "<tr><th>warning</th><td>the score is 104.0 % of the measured peak</td></tr>" in section
    assert "<tr><th>nominal peak</th><td>not known: no clock reported</td></tr>" in section


def test_the_environment_shows_the_processor(tmp_path: Path) -> None:
    section = _between(
        _page(tmp_path, _results()), "<h2>Environment</h2>", "<h2>Measured peak</h2>"
    )
    for row in (
        "<tr><th>processor</th><td>AuthenticAMD family 26, model 2, stepping 1</td></tr>",
        "<tr><th>vector extensions</th><td>avx2, avx512_bf16, avx512f, fma</td></tr>",
        "<tr><th>topology</th><td>1 sockets, 2 cores, 1 threads per core, 2 logical CPUs</td></tr>",
        "<tr><th>caches</th><td>L1d 49.2 kB, L3 33.6 MB</td></tr>",
        "<tr><th>clock</th><td>3200 MHz (cpu MHz of /proc/cpuinfo)</td></tr>",
        "<tr><th>math libraries</th><td>BLAS mkl 2024.2; "
        "oneDNN 3.12.0 on Intel AVX-512 with AVX512BW, "
        "AVX512VL, and AVX512DQ extensions; torch&#x27;s CPU kernels AVX512</td></tr>",
    ):
        assert row in section


def test_the_configuration_shows_what_automatic_settings_resolved_to(tmp_path: Path) -> None:
    section = _between(
        _page(tmp_path, _results()), "<h2>Configuration</h2>", "<h2>Score and accuracy"
    )
    assert "<tr><th>workers</th><td>2 (resolved at run time)</td></tr>" in section
    assert "<tr><th>threads_per_worker</th><td>1 (resolved at run time)</td></tr>" in section
    assert "n/a" not in section.split("<th>workers</th>")[1].split("</tr>")[0]


def test_an_older_report_without_the_new_fields_still_renders(tmp_path: Path) -> None:
    page = _page(tmp_path, json.loads(FIXTURE.read_text()))
    section = _between(page, "<h2>Measured peak</h2>", "<h2>Configuration</h2>")
    assert "nominal" not in section and "processor" not in _between(
        page, "<h2>Environment</h2>", "<h2>Measured"
    )
