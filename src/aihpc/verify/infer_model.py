"""``aihpc verify`` of an inference result: the served model recounted and re-measured.

operations
    The operations of one query recounted, as ``aihpc infer`` counts them: a zoo model's
    (``source.zoo_model``) forward pass with the counter :func:`aihpc.infer.source.from_zoo`
    uses; a run's trial (``source.arch``) with its task's counter: an image model's
    evaluation pass (``count_per_sample``'s eval count), a language model's prefill of its
    prompt plus its decode steps (:func:`aihpc.tasks.language.decode.decode_ops`, summed).  Its
    parameter count too.
quality
    The model rebuilt (:func:`aihpc.infer.source.from_run` on the run the record names, or
    ``from_zoo`` on its synthetic inputs and its recorded seed) and its quality measured again with
    :func:`aihpc.infer.accuracy.check_quality` on the first ``min(64, samples)`` samples, in
    the recorded dtype, on the CPU.  The measure must be the recorded one and agree with it
    within a tolerance stated in the check's line: on the very samples the record measured
    (it measured no more than 64) on the same kind of device, one sample's share (a loss:
    0.1 %); otherwise the record's figure is of all its samples and the sample's may differ
    by chance: four standard errors of the sample's mean (a share p on n samples:
    ``sqrt(max(p (1 - p), 1/n) / n)``; a loss: the windows' spread over ``sqrt(n)``).  A
    result recorded as valid must still keep MLPerf's 99 % of float32's quality, less that
    tolerance.  A zoo model is untrained; its weights are drawn again from the seed the
    record names (records from before the seed was recorded: afresh, so its agreement is
    then only comparable by chance in a dtype other than float32; in float32 it is 1 by
    construction).  Where the run cannot be found or rebuilt the check is
    "unchecked", not failed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aihpc.base.errors import AihpcError
from aihpc.records.inference import InferData, InferQuality
from aihpc.results.read import results_file
from aihpc.verify.checks import Check, Found, Mismatch, same

SAMPLE = 64  # samples the quality is measured again on


def model_checks(folder: Path, data: InferData) -> list[tuple[Check, list[Mismatch]]]:
    """The operations and quality checks (the module docstring); the source is built once."""
    source, why = _source(folder, data)
    return [check_operations(data, source), check_quality(data, source, why)]


def _run_dir(folder: Path, recorded: Any) -> Path | None:
    """The run the record names: as recorded (absolute, or relative to here), else the folder
    above ``folder`` (``aihpc infer RUN_DIR`` writes to RUN_DIR/infer) if it holds a run."""
    candidates = [Path(recorded)] if isinstance(recorded, str) and recorded else []
    candidates.append(Path(folder).resolve().parent)
    return next((c for c in candidates if results_file(c).is_file()), None)


def source_run(folder: Path) -> Path | None:
    """The run whose trial the record in ``folder`` served, where it is found; None for a zoo
    model, or a record that cannot be read."""
    from aihpc.infer.record import RECORD_FILE
    from aihpc.records.files import InferFile, read_result_file

    try:
        document = read_result_file(Path(folder) / RECORD_FILE, "infer")
    except AihpcError:
        return None
    assert isinstance(document, InferFile)  # read_result_file checked its kind
    src = document.data.source
    return None if src.zoo_model else _run_dir(folder, src.run)


def _source(folder: Path, data: InferData) -> tuple[Any, str | None]:
    """The rebuilt source, or None and why not."""
    from aihpc.infer.source import from_run, from_zoo

    src = data.source
    try:
        if src.zoo_model:
            return from_zoo(src.zoo_model, src.input_shape, data.samples, src.seed or 0), None
        run = _run_dir(folder, src.run)
        if run is None:
            return None, f"the run {src.run!r} that was served is not found"
        return from_run(run, min(SAMPLE, data.samples)), None
    except AihpcError as exc:
        return None, f"the model cannot be rebuilt: {exc}"


# -- operations --------------------------------------------------------------------------
def recount(data: InferData, zoo: Any) -> tuple[float, int, str]:
    """(operations per query, parameters, how they were counted)."""
    src = data.source
    if src.arch is not None:
        from aihpc.tasks import task_of

        task = task_of(src.task)
        spec = task.arch(src.arch)
        g = data.generation
        if g is not None:
            prefill, decode = task.decode_ops(spec, g.prompt_tokens, g.new_tokens)
            how = f"a prefill of {g.prompt_tokens} tokens and {g.new_tokens} new tokens"
            return prefill + decode, spec.num_params(), how
        ops = task.count_per_sample(spec, 1, 0.0)[1]
        return ops, spec.num_params(), "the trial's evaluation pass"
    if zoo is None:
        raise AihpcError(f"zoo model {src.zoo_model!r} cannot be built")
    return zoo.ops_per_query, zoo.record.num_params, f"{zoo.label}'s forward pass"


def check_operations(data: InferData, source: Any) -> tuple[Check, list[Mismatch]]:
    found = Found("operations")
    src = data.source
    try:
        ops, params, how = recount(data, source if src.zoo_model else None)
    except (AihpcError, ValueError) as exc:
        found.add(f"the served model's operations cannot be recounted: {exc}")
        return found.outcome("not recounted"), found.items
    if not same(data.ops_per_query, float(ops), rel=1e-9):
        found.add(f"ops_per_query is {data.ops_per_query!r}; recounted {ops!r} from {how}")
    if src.num_params != params:
        found.add(f"source.num_params is {src.num_params!r}; the model has {params}")
    return found.outcome(f"{ops:,.0f} per query recounted from {how}"), found.items


# -- quality -----------------------------------------------------------------------------
def check_quality(data: InferData, source: Any, why: str | None) -> tuple[Check, list[Mismatch]]:
    import torch

    from aihpc.infer import accuracy

    found = Found("quality")
    if source is None:
        return Check("quality", "unchecked", str(why)), []
    q, src = data.quality, data.source
    if src.trial is not None and source.record.trial != src.trial:
        found.add(f"the run's best trial is {source.record.trial}, not the served {src.trial}")
        return found.outcome("the run serves another trial now"), found.items
    n = min(SAMPLE, int(source.inputs.shape[0]))
    inputs = source.inputs[:n]
    targets = None if source.targets is None else source.targets[:n]
    cpu = torch.device("cpu")
    got = accuracy.check_quality(source.model, inputs, targets, cpu, q.dtype)
    tol, basis = tolerance(data, got.measure, n, _spread(source.model, inputs, targets, got, q))
    if got.measure != q.measure:
        found.add(f"the record measures {q.measure}; the model's outputs give {got.measure}")
    elif q.served is None:
        found.add(f"the record has no served {q.measure}")
    elif abs(got.served - q.served) > tol:
        found.add(
            f"{got.measure} {got.served:.4f} on the first {n} samples; the record has "
            f"{q.served:.4f} on {q.samples} (tolerance {tol:.3g}: {basis})"
        )
    if q.valid and got.kept < accuracy.KEEP - tol:
        found.add(
            f"{100 * got.kept:.2f} % of float32's {got.measure} kept on the first {n} samples"
        )
    return found.outcome(
        f"{got.measure} {got.served:.4f} on the first {n} samples in {q.dtype} on the CPU, "
        f"recorded {'none' if q.served is None else f'{q.served:.4f}'} "
        f"(tolerance {tol:.3g}: {basis})"
    ), found.items


def _spread(model: Any, inputs: Any, targets: Any, got: Any, q: InferQuality) -> float | None:
    """The standard deviation of the windows' losses (a language model's); None otherwise."""
    if got.measure != "loss":
        return None
    import torch
    import torch.nn.functional as F

    from aihpc.infer.accuracy import outputs

    logits = outputs(model, inputs, torch.device("cpu"), q.dtype, SAMPLE)
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    per_window = losses.view(targets.shape[0], -1).mean(1)
    return float(per_window.std()) if per_window.numel() > 1 else 0.0


def tolerance(data: InferData, measure: str, n: int, spread: float | None) -> tuple[float, str]:
    """How far the sample's figure may be from the record's (the module docstring)."""
    q = data.quality
    same_samples = n == q.samples and data.device.startswith("cpu")
    deterministic = data.source.arch is not None or q.dtype == "float32"
    if same_samples and deterministic:
        if measure == "loss":
            return 1e-3 * abs(q.served or 0.0), "the same samples: 0.1 %"
        return 1.01 / n, "the same samples: one sample's share"
    if measure == "loss":
        se = (spread or 0.0) / math.sqrt(n)
    else:
        p = min(max(q.served or 0.0, 0.0), 1.0)
        se = math.sqrt(max(p * (1 - p), 1 / n) / n)
    return 4 * se, f"4 standard errors of a mean of {n} samples"
