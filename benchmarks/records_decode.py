"""Benchmark: decoding a large results.json into typed records with three libraries, and their
error messages on a malformed document (issue 43: which library the records are built on).

    python benchmarks/records_decode.py [--source RESULTS] [--copies N] [--repeats R]
                                        [--libraries stdlib,pydantic,msgspec-dataclass,msgspec]
                                        [--out DIR]

The document is ``--source`` (a results.json or .gz; default the test fixture run's) with its
trials written ``--copies`` times (ids shifted, so each copy is a lineage of its own) by
aihpc's own writer (:func:`aihpc.results.write.write_results`, which compresses a file past
64 MB): 64 copies of a 64-worker, 60-minute scale rehearsal's (benchmarks/scale_rehearsal.py
``--sizes 64 --workers 64``) hold as many epochs as the 4,096-worker rehearsal's.  Each
library decodes the file's bytes, already in memory, in a process of its own, ``--repeats``
times as called and as many with Python's cycle collector paused around it (decoding makes
millions of objects, and the collector runs every few hundred: aihpc's reader pauses it), the
least time of each kept, and the peak memory the decoding added:

* ``stdlib``: ``json.loads``, then frozen dataclasses of the trials and epochs built by hand
  (``from_dict``, as the records were before), the other sections left as parsed;
* ``pydantic``: pydantic v2's ``TypeAdapter`` of the same dataclasses, strict, from the bytes;
* ``msgspec-dataclass``: msgspec into the same dataclasses, from the bytes;
* ``msgspec``: aihpc's reader (:func:`aihpc.results.read.decode_results`): msgspec into the
  records of :mod:`aihpc.results.model`, every section typed and checked.

Then each reads five malformed documents (a string where an integer belongs, a trial without
its status, a state that is not one, a fractional operation count, a file cut short) and the
error it gives is printed as it is.  Writes ``records_decode.json`` and ``.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_main import script

from aihpc.records.messages import EpochStatus
from aihpc.records.rows import TrialStatus

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "run" / "results.json"
LIBRARIES = ("stdlib", "pydantic", "msgspec-dataclass", "msgspec")


# -- the records the rival libraries decode into: frozen dataclasses of the trials ---------
@dataclasses.dataclass(frozen=True, slots=True)
class Epoch:
    status: EpochStatus | None = None
    worker: str | None = None
    device: str | None = None
    attempt: int | None = None
    t_start: float | None = None
    t_end: float | None = None
    epoch: int | None = None
    ops: int | None = None
    seconds: float | None = None
    train_samples: int | None = None
    val_samples: int | None = None
    train_loss: float | None = None
    train_accuracy: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    schedule_from: float | None = None
    schedule_to: float | None = None
    model_flops: float | None = None
    regions_needed: int | None = None
    regions_compiled: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Hparams:
    lr: float
    batch_size: int
    weight_decay: float | None = None
    momentum: float | None = None
    dropout: float | None = None
    optimizer: str | None = None
    schedule: str | None = None
    warmup: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Ops:
    train: int
    eval: int
    total: int


@dataclasses.dataclass(frozen=True, slots=True)
class PerSample:
    train: float | None = None
    eval: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Trial:
    id: int
    parent: int | None
    arch_hash: str
    num_params: int | None
    morph: str
    hparams: Hparams
    status: TrialStatus
    reason: str | None
    attempts: int
    worker: str | None
    t_start: float | None
    t_end: float | None
    epochs: tuple[Epoch, ...]
    ops: Ops
    ops_per_sample: PerSample | None
    phase_seconds: dict[str, float]
    arch: dict[str, Any] | None = None
    arch_diff: dict[str, Any] | None = None
    budget_epochs: int | None = None
    traceback: str | None = None
    lineage_start: float | None = None
    lineage_epochs: int | None = None
    hparams_origin: str | None = None
    best_val_accuracy: float | None = None
    best_val_loss: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Document:
    """results.json: its trials typed, every other section as parsed."""

    schema_version: int
    score: dict[str, Any]
    trials: tuple[Trial, ...]
    config: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    peak: Any = None
    data: Any = None
    timeline: Any = None
    workers: Any = None
    segments: Any = None
    screenings: Any = None
    losses: Any = None
    helper_restarts: Any = None
    worker_memory: Any = None
    devices: Any = None
    layout: Any = None
    staging: Any = None
    energy: Any = None
    integrity: Any = None
    model_flops: Any = None
    compilation: Any = None
    aihpc_version: Any = None
    run_id: Any = None


def trial_from_dict(d: dict[str, Any]) -> Trial:
    """A trial built by hand, as the records' ``from_dict`` methods did."""
    per_sample = d.get("ops_per_sample")
    return Trial(
        **{
            **d,
            "status": TrialStatus(d["status"]),
            "hparams": Hparams(**d["hparams"]),
            "ops": Ops(**d["ops"]),
            "ops_per_sample": None if per_sample is None else PerSample(**per_sample),
            "epochs": tuple(
                Epoch(**{**e, "status": EpochStatus(e["status"]) if "status" in e else None})
                for e in d["epochs"]
            ),
        }
    )


def document_from_dict(d: dict[str, Any]) -> Document:
    return Document(**{**d, "trials": tuple(trial_from_dict(t) for t in d["trials"])})


# -- the decoders ---------------------------------------------------------------------------
def decoder(library: str) -> Any:
    """``library``'s decoder: bytes of a results document to its record."""
    if library == "stdlib":
        return lambda data: document_from_dict(json.loads(data))
    if library == "pydantic":
        import pydantic

        adapter = pydantic.TypeAdapter(Document)
        return lambda data: adapter.validate_json(data, strict=True)
    if library == "msgspec-dataclass":
        import msgspec

        return msgspec.json.Decoder(Document).decode
    if library == "msgspec":
        from aihpc.results.read import decode_results

        return lambda data: decode_results(data, "results file")
    raise SystemExit(f"unknown library {library!r}: one of {', '.join(LIBRARIES)}")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def time_decode(library: str, path: Path, repeats: int) -> dict[str, Any]:
    """In this process: ``library`` decoding ``path``'s bytes ``repeats`` times; the least
    seconds, and the peak memory above what held the bytes."""
    from aihpc.base.fileio import open_binary

    with open_binary(path) as f:
        data = f.read()
    decode = decoder(library)
    gc.collect()
    base = rss_bytes()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for paused in (False, True) * repeats:
        if paused:
            gc.disable()
        start = time.perf_counter()
        record = decode(data)
        seconds[paused].append(time.perf_counter() - start)
        gc.enable()
        del record
        gc.collect()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "library": library,
        "seconds": min(seconds[False]),
        "seconds_gc_paused": min(seconds[True]),
        "runs": seconds[False],
        "runs_gc_paused": seconds[True],
        "memory": peak - base,
    }


def measure(library: str, path: Path, repeats: int) -> dict[str, Any]:
    """:func:`time_decode` in a process of its own (its memory is its own)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import records_decode as r; "
        "print(json.dumps(r.time_decode(sys.argv[2], r.Path(sys.argv[3]), int(sys.argv[4]))))"
    )
    here = str(Path(__file__).resolve().parent)
    proc = subprocess.run(
        [sys.executable, "-c", code, here, library, str(path), str(repeats)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"library": library, "seconds": None, "memory": None, "failed": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the document ---------------------------------------------------------------------------
def make_document(source: Path, copies: int, folder: Path) -> dict[str, Any]:
    """``source`` with its trials written ``copies`` times by aihpc's writer into ``folder``."""
    import msgspec

    from aihpc.results.read import read_results
    from aihpc.results.write import write_results

    results = read_results(source)
    step = max((t.id for t in results.trials), default=0) + 1

    def trials() -> Iterator[Any]:
        for copy in range(copies):
            for t in results.trials:
                parent = None if t.parent is None else t.parent + copy * step
                yield msgspec.structs.replace(t, id=t.id + copy * step, parent=parent)

    start = time.perf_counter()
    written = write_results(folder, results.head(), trials())
    return {
        "path": str(written.path),
        "trials": written.trials,
        "epochs": copies * sum(len(t.epochs) for t in results.trials),
        "file_bytes": written.path.stat().st_size,
        "write_seconds": time.perf_counter() - start,
    }


# -- malformed documents --------------------------------------------------------------------
def malformed(source: Path) -> dict[str, bytes]:
    """Five broken versions of the first trial of ``source``'s document."""
    from aihpc.base.fileio import read_json

    doc = read_json(source, "results file")
    doc["trials"] = doc["trials"][:1]

    def variant(change: Any) -> bytes:
        copy = json.loads(json.dumps(doc))
        change(copy)
        return json.dumps(copy, indent=1).encode()

    cases = {
        "a string for an integer": variant(
            lambda d: d["trials"][0]["epochs"][0].update(attempt="1")
        ),
        "a trial without status": variant(lambda d: d["trials"][0].pop("status")),
        "a state that is not one": variant(lambda d: d["trials"][0].update(status="finished")),
        "a fractional count": variant(lambda d: d["trials"][0]["ops"].update(train=1.5)),
    }
    whole = variant(lambda d: None)
    cases["a file cut short"] = whole[: whole.index(b'"epochs"') + 40]
    return cases


def error_of(library: str, data: bytes) -> str:
    """What ``library`` says of ``data``: its error, as it prints, or that it took it."""
    try:
        decoder(library)(data)
    except Exception as exc:  # noqa: BLE001 - every library's own error is the measurement
        return f"{type(exc).__name__}: {exc}"
    return "(accepted: no error)"


# -- the tables -----------------------------------------------------------------------------
def table(document: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{document['trials']:,} trials, {document['epochs']:,} epochs; "
        f"{Path(document['path']).name} {document['file_bytes'] / 1e6:,.1f} MB "
        f"(written by aihpc's writer in {document['write_seconds']:.1f} s)",
        "",
        "| library | decode (s) | with the cycle collector paused (s) | memory added (MB) |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        if row.get("seconds") is None:
            lines.append(f"| {row['library']} | failed: {row.get('failed')} | | |")
        else:
            lines.append(
                f"| {row['library']} | {row['seconds']:.3f} | {row['seconds_gc_paused']:.3f} | "
                f"{row['memory'] / 1e6:,.0f} |"
            )
    return "\n".join(lines)


def errors_table(errors: dict[str, dict[str, str]]) -> str:
    lines = []
    for case, by_library in errors.items():
        lines.append(f"\n**{case}**\n")
        for library, text in by_library.items():
            shown = text if len(text) <= 400 else text[:397] + "..."
            count = text.count("\n") + 1
            lines.append(f"- {library} ({count} line{'s' if count > 1 else ''}): `{shown!r}`")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=FIXTURE, help="a results.json or .gz")
    ap.add_argument("--copies", type=int, default=1, help="times its trials are written")
    ap.add_argument("--repeats", type=int, default=3, help="decodings per library")
    ap.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated")
    ap.add_argument("--out", type=Path, default=None, help="folder for the tables")
    return ap.parse_args(argv)


@script
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    libraries = [name for name in args.libraries.split(",") if name]
    for name in libraries:
        decoder(name)  # an unknown one stops here
    with tempfile.TemporaryDirectory(prefix="records_decode.") as folder:
        document = make_document(args.source, args.copies, Path(folder))
        rows = [measure(name, Path(document["path"]), args.repeats) for name in libraries]
    cases = malformed(args.source)
    errors = {
        case: {name: error_of(name, data) for name in libraries} for case, data in cases.items()
    }
    text = table(document, rows) + "\n" + errors_table(errors)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {"document": document, "decode": rows, "errors": errors}
        (args.out / "records_decode.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "records_decode.md").write_text(text + "\n")
    return 0 if all(row.get("seconds") is not None for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
