"""What ``aihpc infer`` serves: the best trial of a finished run, or a zoo model by name.

:func:`from_run` takes a run directory: its results.json names the trials and
their validation metric; the best trial by the run's quality (the highest
accuracy, or the lowest loss) is served with the weights its last epoch
wrote (the run keeps the best trials' files to its end), its architecture
rebuilt from results.json, and the run's own validation split as the samples
LoadGen queries and the quality is measured on.  :func:`from_zoo` takes a
model of the zoo, untrained (aihpc downloads no weights), on synthetic inputs
of its shape: its quality is the agreement of its predictions with its own
float32 predictions.

Either way a :class:`Source` holds a float32 model on the host, the samples
(inputs, and targets where the data have them), the operations of one query
counted analytically, and how to judge its outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aihpc.base.errors import DataError, StorageError
from aihpc.records.codec import exact
from aihpc.records.inference import InferSource
from aihpc.tasks import Task

if TYPE_CHECKING:
    from aihpc.base.config import RunConfig


@dataclass(frozen=True)
class Source:
    """A model to serve and the samples to serve it on.

    ``inputs``: (N, ...) the queries (images, or a language model's token
    windows); ``targets``: their labels or next tokens (None for a zoo model
    on synthetic inputs); ``ops_per_query``: operations of one sample's
    forward pass (eval mode), counted as ``aihpc count`` counts;
    ``task``: the task whose model it is (a zoo model: the task whose models read its kind of
    input, :func:`aihpc.tasks.serving`); ``record``: what it is, as infer.json records it.
    """

    record: InferSource
    task: Task
    model: torch.nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor | None
    ops_per_query: float

    @property
    def label(self) -> str:
        """What it is, for the records and the summary."""
        return self.record.label

    @property
    def arch(self) -> dict[str, Any] | None:
        """The architecture of a model of aihpc's search (the task's value); None for a zoo
        model."""
        return self.record.arch


def from_run(run_dir: Path, samples: int | None = None) -> Source:
    """The best trial of the finished run in ``run_dir`` (DataError, StorageError: one line)."""
    from aihpc.results.read import architecture, read_results, results_file
    from aihpc.tasks import of_run, read_config

    path = results_file(run_dir)
    if not path.is_file():
        raise DataError(f"{run_dir} holds no finished run (no {path.name}): nothing to serve")
    results = read_results(path)
    task, quality = of_run(results.config, results.data.to_dict() if results.data else None)
    trials = {t.id: t for t in results.trials}
    scored = [
        (value, t) for t in trials.values() if (value := t.best(quality.trial_key)) is not None
    ]
    if not scored:
        raise DataError(f"{run_dir}: no trial finished an evaluation: nothing to serve")
    value, best = max(scored, key=lambda scored: quality.goodness(scored[0]))
    arch = architecture(trials, best.id)
    if arch is None:
        raise DataError(f"{run_dir}: the architecture of trial {best.id} cannot be rebuilt")
    spec = task.arch(arch)
    model = task.model(spec)
    model.load_state_dict(_trial_weights(Path(run_dir), best.id), strict=True)
    config = read_config(results.config, source="the run's recorded configuration")
    inputs, targets = _validation(task, config, samples)
    _, eval_ops = task.count_per_sample(spec, 1, 0.0)
    described = {
        "label": f"trial {best.id} of {run_dir}",
        "task": task.name,
        "arch": arch,
        "run": str(Path(run_dir).resolve()),
        "trial": best.id,
        quality.trial_key: value,  # the run's quality, by its name (InferSource's fields)
        "num_params": spec.num_params(),
    }
    record = exact(described, InferSource, f"what {run_dir} serves")
    return Source(record, task, model.eval(), inputs, targets, eval_ops)


def _trial_weights(run_dir: Path, trial_id: int) -> dict[str, torch.Tensor]:
    """The model state of the last weights trial ``trial_id`` committed, SHA-256 checked."""
    from aihpc.records.store import RunStore
    from aihpc.train.weights import load

    if not (run_dir / "aihpc.sqlite").is_file():
        raise DataError(f"{run_dir} holds no run store (aihpc.sqlite): the weights are unknown")
    store = RunStore.read_only(run_dir)
    try:
        refs = [e.weights for e in store.epochs(trial_id) if e.weights is not None]
    finally:
        store.close()
    if not refs:
        raise DataError(f"{run_dir}: trial {trial_id} wrote no weights")
    try:
        return load(run_dir / "weights", refs[-1])[0]
    except StorageError as exc:
        raise DataError(f"{run_dir}: the best trial's weights cannot be served: {exc}") from None


def _validation(
    task: Task, config: RunConfig, samples: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's validation split (its first ``samples``): inputs and targets."""
    import numpy as np

    from aihpc.records.messages import DataRef

    val = task.splits(DataRef.of(config))[1]
    n = len(val) if samples is None else min(samples, len(val))
    positions = np.arange(n, dtype=np.int64)
    raw = torch.from_numpy(np.ascontiguousarray(val.raw(positions), dtype=val.dtype))
    if val.normalizer is not None:
        raw = val.normalizer.apply_(raw)
    labels = torch.from_numpy(np.ascontiguousarray(val.label(positions), dtype=np.int64))
    return task.inputs_and_targets(raw, labels)


def from_zoo(name: str, input_shape: tuple[int, ...] | None, samples: int, seed: int = 0) -> Source:
    """Zoo model ``name`` (untrained) on ``samples`` synthetic inputs of its shape."""
    from aihpc import models
    from aihpc.counting import count_ops
    from aihpc.tasks import serving

    info = models.info(name)
    shape = tuple(input_shape or info.input_shape)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the untrained weights: the same again for verify
    task = serving(info.input_kind)
    if info.input_kind == "tokens":
        model = models.create(name)
        inputs = torch.randint(0, info.num_classes, (samples, *shape), generator=gen)
        with torch.device("meta"):
            meta = models.create(name)
        example: Any = torch.zeros((1, *shape), dtype=torch.long, device="meta")
    else:
        model = models.create(name, in_channels=shape[0])
        inputs = torch.randn((samples, *shape), generator=gen)
        with torch.device("meta"):
            meta = models.create(name, in_channels=shape[0])
        example = (1, *shape)
    ops = count_ops(meta, example, train=False).total
    record = InferSource(
        label=name,
        task=task.name,
        arch=None,
        zoo_model=name,
        input_shape=shape,
        seed=seed,
        num_params=sum(p.numel() for p in model.parameters()),
    )
    return Source(record, task, model.eval(), inputs, None, float(ops))
