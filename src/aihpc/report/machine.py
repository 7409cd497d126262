"""The report's sections on the machine: its environment and processor, the measured and nominal
peaks the shares divide by, and the configuration with the values resolved at run time.

Every function takes the parsed results.json (any version: sections an older
file lacks show as "n/a" or are left out) and returns HTML.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from aihpc.base.fmt import NA, as_number, format_fraction, format_si, format_value
from aihpc.report.markup import figure_card, kv_table, no_data
from aihpc.report.quality import quality_for


def section(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` where it is a dict (a section of results.json), else an empty one."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


# -- the header's card -------------------------------------------------------------------
def peak_card(results: dict[str, Any]) -> str:
    """The share of the measured peak, with the share of the nominal one under it."""
    score = section(results, "score")
    used = as_number(score.get("peak_flops_per_s"))
    notes = [_peak_note(results, used)]
    nominal = as_number(score.get("nominal_peak_fraction"))
    if nominal is not None:
        notes.append(
            f"{format_fraction(nominal)} of the nominal "
            f"{format_si(score.get('nominal_peak_flops_per_s'), 'FLOP/s')}"
        )
    if score.get("peak_warning"):
        notes.append("above 100 %: the measured peak is unreliable")
    return figure_card(
        "Share of peak",
        format_fraction(score.get("peak_fraction")),
        " · ".join(notes),
        score.get("not_repeatable"),
    )


def _peak_note(results: dict[str, Any], used: float | None) -> str:
    """What the share of peak divides by: the total peak of all workers measured at once."""
    if used is None:
        return "no peak measured"
    peak = section(results, "peak")
    workers = peak.get("workers")
    if as_number(peak.get("total_flops_per_s")) is not None and as_number(workers) is not None:
        return (
            f"of {format_si(used, 'FLOP/s')}, the total measured peak of "
            f"{format_value(workers)} workers at once"
        )
    return f"of {format_si(used, 'FLOP/s')} measured peak"


# -- environment -------------------------------------------------------------------------
def environment(results: dict[str, Any]) -> str:
    """Host, processor (in detail where recorded), GPUs, software; the rest of the section below."""
    env = section(results, "environment")
    if not env:
        return no_data("no environment recorded")
    commit = env.get("git_commit")
    dirty = env.get("git_dirty")
    commit_text = format_value(commit) + (
        " (dirty)" if dirty else " (clean)" if dirty is False else ""
    )
    main = [
        ("host", format_value(env.get("hostname"))),
        ("CPU", format_value(env.get("cpu_model"))),
        *processor_rows(env.get("cpu")),
        ("GPUs", _gpu_text(env.get("gpus"))),
        ("torch", format_value(env.get("torch_version"))),
        ("git commit", commit_text),
    ]
    shown = {"hostname", "cpu_model", "cpu", "gpus", "torch_version", "git_commit", "git_dirty"}
    rest = [(str(k), format_value(v)) for k, v in sorted(env.items()) if k not in shown]
    return kv_table(main + rest)


def processor_rows(cpu: Any) -> list[tuple[str, str]]:
    """The processor's identity, vector extensions, topology, caches, clock and math libraries
    (none for files written before aihpc recorded them)."""
    if not isinstance(cpu, dict):
        return []
    ident = ", ".join(
        f"{key} {cpu[key]}" for key in ("family", "model", "stepping") if cpu.get(key) is not None
    )
    topology = (
        f"{format_value(cpu.get('sockets'))} sockets, {format_value(cpu.get('cores'))} cores, "
        f"{format_value(cpu.get('threads_per_core'))} threads per core, "
        f"{format_value(cpu.get('logical_cpus'))} logical CPUs"
    )
    clock = f"{format_value(cpu.get('clock_mhz'))} MHz"
    if cpu.get("max_clock_mhz") is not None:
        clock += f", at most {format_value(cpu['max_clock_mhz'])} MHz"
    if cpu.get("clock_source"):
        clock += f" ({cpu['clock_source']})"
    libraries = (
        f"BLAS {format_value(cpu.get('blas'))}; oneDNN {format_value(cpu.get('onednn_version'))} "
        f"on {format_value(cpu.get('onednn_isa'))}; torch's CPU kernels "
        f"{format_value(cpu.get('torch_cpu_capability'))}"
    )
    return [
        ("processor", f"{format_value(cpu.get('vendor'))} {ident}".strip()),
        ("vector extensions", ", ".join(cpu.get("extensions") or []) or "none recorded"),
        ("topology", topology),
        ("caches", _caches_text(cpu.get("caches"))),
        ("clock", clock),
        ("math libraries", libraries),
    ]


def _caches_text(caches: Any) -> str:
    if not isinstance(caches, list) or not caches:
        return NA
    parts = []
    for c in caches:
        if isinstance(c, dict):
            kind = {"data": "d", "instruction": "i"}.get(str(c.get("kind")), "")
            size = format_si(c.get("size_bytes"), "B", count=True)
            parts.append(f"L{format_value(c.get('level'))}{kind} {size}")
    return ", ".join(parts) or NA


def _gpu_text(gpus: Any) -> str:
    if not gpus:
        return "none"
    if not isinstance(gpus, list):
        return format_value(gpus)
    names = []
    for gpu in gpus:
        if isinstance(gpu, dict):
            names.append(str(gpu.get("name") or format_value(gpu)))
        else:
            names.append(str(gpu))
    counted = Counter(names)
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in counted.items())


# -- configuration -----------------------------------------------------------------------
#: Settings left automatic (null) in the configuration, and where the run recorded the value
#: it resolved them to: (section of results.json, key there).
RESOLVED = {
    "workers": ("layout", "workers"),
    "threads_per_worker": ("layout", "threads"),
    "device": ("layout", "device"),
    "max_params": ("data", "max_params"),
    "max_val_loss": ("score", "max_val_loss"),
}
#: Settings of one quality that a run of the other does not use: (quality name, setting).
UNUSED = {("loss", "min_accuracy")}


def configuration(results: dict[str, Any]) -> str:
    """The configuration; an automatic setting shows the value the run resolved it to, and a
    setting of the other task's quality says that this run did not use it."""
    config = section(results, "config")
    if not config:
        return no_data("no configuration recorded")
    quality = quality_for(results)
    rows = []
    for key, value in sorted(config.items()):
        where = RESOLVED.get(key)
        resolved = section(results, where[0]).get(where[1]) if where else None
        if resolved is not None and (value is None or value == "auto"):
            rows.append((str(key), f"{format_value(resolved)} (resolved at run time)"))
        elif (quality.name, key) in UNUSED:
            rows.append(
                (str(key), f"{format_value(value)} (unused: the quality is the {quality.label})")
            )
        else:
            rows.append((str(key), format_value(value)))
    return kv_table(rows)


# -- the peaks ---------------------------------------------------------------------------
def peaks(results: dict[str, Any]) -> str:
    """The measured peak the share uses (which kernel, each worker's part), the nominal peak,
    before and after the run, and every warning about them."""
    peak = section(results, "peak")
    total = as_number(peak.get("total_flops_per_s"))
    if total is None:  # results of early versions: one entry per dtype
        rows = [
            (
                " on ".join(str(x) for x in (entry.get("dtype", name), entry.get("device")) if x),
                format_si(entry.get("flops_per_s"), "FLOP/s"),
            )
            for name, entry in sorted(peak.items())
            if isinstance(entry, dict)
        ]
        rows += _share_rows(results, None)
        return kv_table(rows) if rows else no_data("no peak measured")
    what = " on ".join(str(x) for x in (peak.get("dtype"), peak.get("device")) if x) or "matmul"
    rows = [
        (
            f"total: {what}, {format_value(peak.get('workers'))} workers at once, before the run "
            "(the share of peak uses this)",
            format_si(total, "FLOP/s"),
        ),
        ("fastest kernel", ", ".join(peak.get("kernels") or []) or "matmul (before the search)"),
    ]
    rows += _worker_rows(peak)
    if as_number(peak.get("spread")) is not None:
        rows.append(("largest spread of a worker's repeats", format_fraction(peak.get("spread"))))
    rows += _nominal_rows(peak)
    rows += _share_rows(results, total)
    rows += _after_rows(peak)
    for key in ("above_nominal", "drift_warning"):
        if peak.get(key):
            rows.append(("warning", str(peak[key])))
    return kv_table(rows)


def _after_rows(peak: dict[str, Any]) -> list[tuple[str, str]]:
    """The peak after the run and its drift; where the run lost workers, which workers the drift
    compares (those measured both times, ``drift_workers``)."""
    after = section(peak, "after")
    if as_number(after.get("total_flops_per_s")) is None:
        return []
    total, drift = "total after the run", "drift"
    compared = peak.get("drift_workers")
    if isinstance(compared, list) and len(compared) != peak.get("workers"):
        total += f", on the {format_value(after.get('workers'))} worker(s) left"
        drift += f" of worker(s) {', '.join(map(str, compared))}, each against its own"
    return [
        (total, format_si(after.get("total_flops_per_s"), "FLOP/s")),
        (drift, format_fraction(peak.get("drift"))),
    ]


def _nominal_rows(peak: dict[str, Any]) -> list[tuple[str, str]]:
    nominal = section(peak, "nominal")
    if not nominal:
        return []
    if as_number(nominal.get("flops_per_s")) is None:
        return [("nominal peak", f"not known: {nominal.get('note')}")]
    text = format_si(nominal["flops_per_s"], "FLOP/s")
    if nominal.get("derivation"):
        text += f" = {nominal['derivation']}"
    if nominal.get("note"):
        text += f" ({nominal['note']})"
    return [("nominal peak (the hardware's figures)", text)]


def _worker_rows(peak: dict[str, Any]) -> list[tuple[str, str]]:
    """Each worker's part of the total (measured at the same time) and its kernel search; min /
    median / max beyond 8 workers."""
    workers = [w for w in peak.get("per_worker") or [] if isinstance(w, dict)]
    values = [v for v in (as_number(w.get("flops_per_s")) for w in workers) if v is not None]
    if len(values) > 8:
        return [
            (
                f"per worker, {len(values)} workers (min / median / max)",
                " / ".join(
                    format_si(v, "FLOP/s")
                    for v in (min(values), statistics.median(values), max(values))
                ),
            )
        ]
    rows = []
    for n, w in enumerate(workers, 1):
        rows.append((f"worker {n} of {len(workers)}, part of the total", _worker_text(w)))
    return rows


def _worker_text(worker: dict[str, Any]) -> str:
    """A worker's rate, and each of its processes' kernel search (the fastest first)."""
    text = format_si(worker.get("flops_per_s"), "FLOP/s")
    for part in worker.get("parts") or []:
        if not isinstance(part, dict) or not part.get("candidates"):
            continue
        tried = sorted(
            (c for c in part["candidates"] if isinstance(c, dict)),
            key=lambda c: -(as_number(c.get("flops_per_s")) or 0.0),
        )
        text += "; searched: " + ", ".join(
            f"{c.get('kernel')} {format_si(c.get('flops_per_s'), 'FLOP/s')}" for c in tried
        )
    return text


def _share_rows(results: dict[str, Any], total: float | None) -> list[tuple[str, str]]:
    """How the shares of peak are computed, and a warning if the score used another peak than the
    total or its share passed 100 %."""
    score = section(results, "score")
    used = as_number(score.get("peak_flops_per_s"))
    if used is None or as_number(score.get("peak_fraction")) is None:
        return []
    ops = format_si(score.get("ops_per_second"), "OPS")
    rows = [
        (
            "share of the measured peak",
            f"{ops} ÷ {format_si(used, 'FLOP/s')} = {format_fraction(score.get('peak_fraction'))}",
        )
    ]
    nominal = as_number(score.get("nominal_peak_flops_per_s"))
    if nominal is not None:
        rows.append(
            (
                "share of the nominal peak (model FLOPs utilisation)",
                f"{ops} ÷ {format_si(nominal, 'FLOP/s')} = "
                f"{format_fraction(score.get('nominal_peak_fraction'))}",
            )
        )
    if score.get("peak_warning"):
        rows.append(("warning", str(score["peak_warning"])))
    if total is not None and abs(used - total) > 1e-9 * total:
        rows.append(
            (
                "warning",
                f"the score's share of peak used {format_si(used, 'FLOP/s')}, "
                f"not the measured total {format_si(total, 'FLOP/s')}",
            )
        )
    return rows
