"""The summary of one ``benchmarks/gpu_check.sh`` call: every figure issue 41 asks for, as Markdown.

    python benchmarks/gpu_summary.py OUT [--write FILE]     (default OUT/summary.md; printed too)

Reads the files the call wrote in its output folder OUT, each where present (a
step that did not run, failed or was stopped leaves its file out, and the
summary says so beside the figures it would have given):

    steps.tsv            the steps: name, status, seconds, timeout, note (gpu_check.sh writes it)
    device.txt           the device, torch and aihpc
    lm-results.json      the language run's results.json; lm-profile.json, its seed's profiled
                         epoch (gpu_fill.py --profile-out: kernel time by group)
    fill-results.json    the image run's (and compile-, stream-results.json)
    lm-step.json         lm_step.py's figures: the language seed's step each way
    infer-resnet50.json  the zoo ResNet-50's inference record (aihpc infer's infer.json);
                         infer-lm.json, the language run's best trial's
    verify-NAME.json     ``aihpc verify --json`` of the run or inference NAME
    tests.xml            the GPU tests' JUnit report

Each figure stands beside issue 41's goal for it.  Where a figure needs a
field that this aihpc's records do not hold, the line says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from analysis import percent, quality_text, tally_text, trial_tally, utilisation, worker_busy
from bench_main import script

# issue 41's goals: the language run's share of the measured bf16 peak in a 3-minute run (goal,
# mark), the harness overhead, the elementwise share of the kernel time, ResNet-50's server rate
# within its bound against its offline rate, the image run's share of the peak
GOALS = {"lm_share": (0.45, 0.55), "overhead": 0.05, "elementwise": 0.20, "server": 0.50, "image_share": 0.25}
RUNS = (("lm", "Language run (`--task lm`)"), ("fill", "Image run (the default workload)"),
        ("compile", "Image run, regional compilation"), ("stream", "Image run, data streamed"))  # fmt: skip
INFERENCES = (("infer-resnet50", "ResNet-50 served (zoo, untrained)"),
              ("infer-lm", "The language run's best trial served"))  # fmt: skip


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the output folder of gpu_check.sh")
    ap.add_argument("--write", type=Path, help="where to write the summary (default OUT/summary.md)")
    args = ap.parse_args(argv)
    if not args.out.is_dir():
        ap.error(f"{args.out} is not a folder")
    text = summary(args.out)
    (args.write or args.out / "summary.md").write_text(text)
    print(text, end="")
    return 0


def summary(out: Path) -> str:
    """The whole summary of the output folder ``out``."""
    device = (out / "device.txt").read_text().strip() if (out / "device.txt").is_file() else "not recorded"
    lines = ["# gpu_check summary", "", f"Device: {device}", "", *steps_section(out)]
    steps = read_steps(out)
    for name, title in RUNS:
        if name in steps or (out / f"{name}-results.json").is_file():
            lines += ["", f"## {title}", "", *run_section(out, name, steps)]
    if "lm-step" in steps or (out / "lm-step.json").is_file():
        lines += ["", "## The language seed's training step, each way", "", *lm_step_section(out, steps)]
    for name, title in INFERENCES:
        if name in steps or (out / f"{name}.json").is_file():
            lines += ["", f"## {title}", "", *infer_section(out, name, steps)]
    lines += ["", "## GPU tests", "", tests_line(out, steps)]
    return "\n".join(lines) + "\n"


def read_steps(out: Path) -> dict[str, dict[str, str]]:
    """steps.tsv: step name -> its status, seconds, timeout and note (the last line of a name wins)."""
    path = out / "steps.tsv"
    steps = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        name, status, seconds, timeout, note = (line.split("\t") + [""] * 5)[:5]
        steps[name] = {"status": status, "seconds": seconds, "timeout": timeout, "note": note}
    return steps


def steps_section(out: Path) -> list[str]:
    steps = read_steps(out)
    if not steps:
        return ["Steps: not recorded (no steps.tsv)."]
    rows = [f"| {name} | {s['status']} | {s['seconds']} s | {s['timeout']} s | {s['note']} |"
            for name, s in steps.items()]  # fmt: skip
    return ["| step | status | took | timeout | note |", "| --- | --- | ---: | ---: | --- |", *rows]


def missing(name: str, what: str, steps: dict[str, dict[str, str]]) -> str:
    """Why ``what`` (a file of step ``name``) is not there: the step's status, or that it did not run."""
    step = steps.get(name)
    if step is None:
        return f"not measured: step {name} did not run in this call"
    why = f"{step['status']}" + (f": {step['note']}" if step["note"] else "")
    return f"not measured: step {name} {why} ({what} not written)"


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def table(rows: list[tuple[str, str, str]]) -> list[str]:
    return ["| figure | measured | goal (issue 41) |", "| --- | --- | --- |",
            *(f"| {a} | {b} | {c} |" for a, b, c in rows)]  # fmt: skip


def run_section(out: Path, name: str, steps: dict[str, dict[str, str]]) -> list[str]:
    """A run's figures: trials trained and lost, share of peak, busy fraction and overhead, and
    (for the language run) the kernel time by group in its seed's profiled epoch."""
    from aihpc.base.fmt import format_si

    results = read_json(out / f"{name}-results.json")
    if results is None:
        return [missing(name, f"{name}-results.json", steps)]
    s, u = results["score"], utilisation(results)
    share_goal = (f"at least {percent(GOALS['lm_share'][0], 0)} in 3 minutes, {percent(GOALS['lm_share'][1], 0)} "
                  "the mark" if name == "lm" else f"at least {percent(GOALS['image_share'], 0)}")
    rows = [
        ("trials trained and lost", tally_text(trial_tally(results)), "none lost"),
        ("score", f"{format_si(s['ops_per_second'], 'OPS')} over {s['wall_seconds']:.0f} s, {quality_text(s)}, "
                  f"{'VALID' if s.get('valid') else 'INVALID'}", ""),
        ("share of the measured peak", f"{percent(s.get('peak_fraction'))} of "
                                       f"{format_si(s.get('peak_flops_per_s'), 'FLOP/s')}", share_goal),
        ("share of the nominal peak", percent(s.get("nominal_peak_fraction")), ""),
        ("workers busy (a task in hand)", percent(worker_busy(results)), ""),
        ("training and evaluation / harness overhead",
         f"{percent(u['work_fraction'])} / {percent(u['overhead_fraction'])}", f"overhead under {percent(GOALS['overhead'], 0)}"),
    ]  # fmt: skip
    mf = results.get("model_flops")
    if mf and mf.get("utilisation") is not None:
        rows.append(("model FLOPs utilisation (of nominal)", percent(mf["utilisation"]), ""))
    if name == "lm":
        rows.append(profile_row(out, steps))
    rows.append(("aihpc verify", verify_text(out, name, steps), "VERIFIED"))
    return table(rows)


def profile_row(out: Path, steps: dict[str, dict[str, str]]) -> tuple[str, str, str]:
    """The kernel time by group in the language seed's profiled epoch (gpu_fill.py's profile)."""
    goal = f"elementwise under {percent(GOALS['elementwise'], 0)}"
    figures = read_json(out / "lm-profile.json")
    if figures is None:
        return "kernel time by group (seed's training steps)", missing("lm", "lm-profile.json", steps), goal
    where = (f"{figures['samples']} windows, batch {figures['batch']}, "
             f"{figures['params']:,} parameters, on {figures['device']}")  # fmt: skip
    total = figures["kernel_s"]
    if not total:
        types = ", ".join(f"{t} {s:.3f} s" for t, s in figures["types"][:5])
        return f"kernel time by group ({where})", f"no GPU kernels recorded; by operator type: {types}", goal
    groups = ", ".join(f"{g} {percent(s / total)}" for g, s in figures["groups"].items())
    return (f"kernel time by group ({where}; GPU idle {percent(figures['idle_steps'])} of the steps)",
            f"{total:.3f} s: {groups}", goal)


def lm_step_section(out: Path, steps: dict[str, dict[str, str]]) -> list[str]:
    """lm_step.py's variants: step time, model FLOPs per second (and their share of the language
    run's measured peak, where this call made one), compilation, and the elementwise share of
    the kernel time where profiled."""
    doc = read_json(out / "lm-step.json")
    if doc is None:
        return [missing("lm-step", "lm-step.json", steps)]
    run = read_json(out / "lm-results.json") or {}
    peak = ((run.get("peak") or {}).get("total_flops_per_s") or 0) / 1e12
    rows = []
    for v in doc["variants"]:
        if "error" in v:
            rows.append((v["variant"], f"failed: {v['error']}", ""))
            continue
        share = f" ({percent(v['model_tflops'] / peak)} of the measured peak)" if peak else ""
        text = (f"{1e3 * v['step_s']:.1f} ms a step, {v['model_tflops']:.0f} TFLOP/s in model FLOPs{share}; "
                f"compile {v['compile_s']:.1f} s, regions {v['regions']['compiled']}/{v['regions']['needed']}")
        kernels = v.get("kernels")
        if kernels and kernels.get("busy_s"):
            elementwise = kernels["by_kind"].get("elementwise", 0.0) / kernels["busy_s"]
            text += f"; elementwise {percent(elementwise)} of kernel time"
        rows.append((v["variant"], text, f"elementwise under {percent(GOALS['elementwise'], 0)}"))
    return table(rows)


def verify_text(out: Path, name: str, steps: dict[str, dict[str, str]]) -> str:
    verdict = read_json(out / f"verify-{name}.json")
    if verdict is None:
        return missing(f"verify-{name}", f"verify-{name}.json", steps)
    words = {"yes": "VERIFIED", "no": "DOES NOT VERIFY"}
    text = words.get(verdict["status"], verdict["status"])
    mismatches = verdict.get("mismatches") or []
    if not mismatches:
        return text
    return f"{text}: {len(mismatches)} mismatches, the first: {mismatches[0]['line']}"


def infer_section(out: Path, name: str, steps: dict[str, dict[str, str]]) -> list[str]:
    """An inference's figures: the offline rate and its share of the peak, the server's rate within
    its bound against the offline rate, single-stream's latency, and the p99 split; for a language
    model, its tokens' latencies at the server's point shown."""
    doc = read_json(out / f"{name}.json")
    if doc is None:
        return [missing(name, f"{name}.json", steps)]
    data = doc["data"]
    scenarios = data["scenarios"]
    offline, server, single = (scenarios.get(k) or {} for k in ("offline", "server", "single-stream"))
    rate, best = offline.get("samples_per_second"), server.get("max_qps")
    ratio = None if rate is None or best is None else best / rate
    valid = "VALID" if data["valid"] else "INVALID: " + "; ".join(data["invalid_reasons"])
    rows = [
        ("served", f"{data['source']['label']} on {data['device']} in {data['dtype']}, {valid}", ""),
        ("offline", f"{_rate(rate)} samples/s; {percent(offline.get('peak_fraction'))} of the measured peak, "
                    f"{percent(offline.get('nominal_peak_fraction'))} of nominal", ""),
        (f"server within {bound_text(data.get('bounds') or {})}", f"{_rate(best)} queries/s = "
         f"{percent(ratio)} of the offline rate", f"at least {percent(GOALS['server'], 0)} of the offline rate"),
        ("single-stream", f"p90 {_ms(single.get('p90_latency_s'))}, p50 {_ms(single.get('p50_latency_s'))}", ""),
    ]  # fmt: skip
    if data.get("generation"):
        rows.append(("server p99: first token / per output token",
                     f"{_ms(server.get('p99_first_token_s'))} / {_ms(server.get('p99_time_per_output_token_s'))}", ""))
    rows += [("server p99: queueing / compute", p99_split(server), "says which missed the bound"),
             ("aihpc verify", verify_text(out, name, steps), "VERIFIED")]  # fmt: skip
    return table(rows)


def bound_text(bounds: dict[str, Any]) -> str:
    """The server's bound: on a sample's latency, or on a language model's first token and each
    output token, at its percentile."""
    at = f"at p{100 * bounds.get('percentile', 0.99):g}"
    if bounds.get("latency") is not None:
        return f"{_ms(bounds['latency'])} {at}"
    return f"first token {_ms(bounds.get('ttft'))}, per token {_ms(bounds.get('tpot'))} {at}"


def p99_split(server: dict[str, Any]) -> str:
    """The server's 99th-percentile latency split into queueing and compute (issue 41, item 2): the
    record's ``timing`` of the test the scenario shows (:func:`aihpc.infer.latency.timing_split`),
    with its slowest 1 %'s means, which add up where the percentiles need not."""
    timing = server.get("timing")
    if not timing:
        return f"not in the record (p99 {_ms(server.get('p99_latency_s'))} in all)"
    tail = timing.get("tail") or {}
    return (
        f"p99 {_ms(timing.get('p99_latency_s'))}: queueing {_ms(timing.get('p99_queueing_s'))}, "
        f"compute {_ms(timing.get('p99_compute_s'))}; slowest 1 % {_ms(tail.get('latency_s'))} = "
        f"{_ms(tail.get('queueing_s'))} + {_ms(tail.get('compute_s'))}"
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = 1e3 * seconds
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def tests_line(out: Path, steps: dict[str, dict[str, str]]) -> str:
    """The GPU tests' counts from their JUnit report."""
    path = out / "tests.xml"
    if not path.is_file():
        return missing("tests", "tests.xml", steps)
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, f"no testsuite in {path}"
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
    text = f"{passed} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped"
    return text + (f" (failed: {', '.join(failed)})" if failed else "") + f", in {float(suite.get('time', 0)):.0f} s"


if __name__ == "__main__":
    sys.exit(main())
