"""Proxy screening on a worker: which of several candidate children is worth training.

With ``screen = K`` (``aihpc run --screen K``), the master morphs K different
children from one parent and sends them to a worker in one
:class:`~aihpc.records.messages.ScreenTask`.  The worker builds each at a fresh
initialisation (the same seed for all), measures the zero-cost proxies of
:mod:`aihpc.recommend.proxies` on one seeded minibatch of
:data:`~aihpc.recommend.scoring.PROXY_BATCH` training samples, and the
shipped matcher (:mod:`aihpc.recommend.matcher`) predicts each candidate's
accuracy from its proxies, its size and the task's complexity (measured once
per worker and data set, on a bounded sample).  The master trains the
candidate with the highest prediction; the others are never trained.

Why at a fresh initialisation, when the chosen child then starts from its
parent's trained weights: a function-preserving child computes exactly its
parent's function, so proxies on the inherited weights would mostly score
the parent.  At initialisation they measure what the architecture can
learn, which is what the matcher was calibrated on.

The screening's operations (:func:`screening_ops` per candidate: what
:func:`aihpc.recommend.proxies.proxy_ops` counts, layer by layer) count in the
run's score like any other work.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

import torch

from aihpc.machine.devices import resolve_device, worker_name
from aihpc.records.messages import DataRef, ScreenResult, ScreenStatus, ScreenTask
from aihpc.tasks import Task
from aihpc.train.staging import stage

if TYPE_CHECKING:
    from aihpc.recommend.matcher import Matcher
    from aihpc.records.kinds_recommend import ComplexityRecord
    from aihpc.tasks.image.spec import ArchSpec


def screen_children(kind: Task, task: ScreenTask) -> ScreenResult:
    """Score every candidate of ``task`` on the data of the run's task ``kind`` (the master gives
    it with the work: ``functools.partial(screen_children, kind)``); never raises (a failure is
    data for the master)."""
    t_start = time.time()
    worker = worker_name()
    try:
        if task.threads:
            torch.set_num_threads(task.threads)
        device = resolve_device(task.device)
        x, y = minibatch(kind, task.data, str(device), task.seed)
        predicted, proxies, ops = _score(kind, task, device, x, y)
        chosen = max(range(len(predicted)), key=lambda i: (predicted[i], -i))
        return ScreenResult(
            task.screen_id,
            ScreenStatus.OK,
            worker,
            t_start,
            time.time(),
            predicted=predicted,
            proxies=proxies,
            ops=ops,
            chosen=chosen,
            batch=len(y),
            device=device.type,
        )
    # e.g. a candidate too big for the device: the master trains one unscreened
    except Exception as exc:
        return ScreenResult(
            task.screen_id,
            ScreenStatus.FAILED,
            worker,
            t_start,
            time.time(),
            reason=f"{type(exc).__name__}: {exc}".strip().splitlines()[0],
        )


def _score(
    kind: Task, task: ScreenTask, device: torch.device, x: torch.Tensor, y: torch.Tensor
) -> tuple[list[float], list[dict[str, float]], list[int]]:
    """(the matcher's predicted accuracy, proxies, operations) of every candidate, in order."""
    from aihpc.recommend.matcher import features
    from aihpc.recommend.proxies import score_all
    from aihpc.recommend.scoring import CandidateScore
    from aihpc.tasks.image.build import SpecNet
    from aihpc.tasks.image.spec import ArchSpec

    complexity = task_complexity(kind, task.data, str(device))
    predicted, proxies, ops = [], [], []
    for arch in task.candidates:
        spec = ArchSpec.from_dict(arch)
        torch.manual_seed(task.seed)
        model = SpecNet(spec).to(device)
        scores = score_all(model, x, y, task.seed)
        spent, per_sample = screening_ops(spec, len(y))
        candidate = CandidateScore(
            name="child",
            source="spec",
            detail="",
            params=spec.num_params(),
            ops_per_sample=per_sample,
            proxies=scores,
        )
        prediction = _matcher().predict(features(complexity, candidate), complexity.num_classes)
        predicted.append(float(prediction.accuracy[0]))
        proxies.append(scores)
        ops.append(spent)
    return predicted, proxies, ops


def screening_ops(spec: ArchSpec, batch: int) -> tuple[int, float]:
    """(operations the proxies spend on candidate ``spec`` with a minibatch of ``batch``, its
    training operations per sample): :func:`aihpc.recommend.proxies.proxy_ops` of
    ``SpecNet(spec)``, bit for bit, from the layer-by-layer count of
    :func:`aihpc.tasks.image.count.count_spec` (each dropout layer at its own rate, as
    ``SpecNet`` builds it).  ``aihpc verify`` recounts a run's screenings with it: on a run of
    29 screenings of 2 candidates it took 3.6 s in all, 6.2 s with the whole-network count."""
    from aihpc.recommend.proxies import proxy_total
    from aihpc.tasks.image.count import count_spec

    step, forward = count_spec(spec, batch, None)
    return proxy_total(step, forward, batch), step / batch


def minibatch(
    kind: Task, ref: DataRef, device: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The proxies' minibatch: ``PROXY_BATCH`` training samples drawn with ``seed`` (float32 on
    ``device``)."""
    from aihpc.recommend.scoring import PROXY_BATCH

    train = stage(kind, ref, device).train
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(train), generator=g)[:PROXY_BATCH].to(train.x.device)
    return train.x[idx].float().to(device), train.y[idx].to(device)


#: The complexity measures a worker took, by data set and device (:func:`task_complexity`).
_COMPLEXITY: dict[tuple[DataRef, str], ComplexityRecord] = {}


def task_complexity(kind: Task, ref: DataRef, device: str) -> ComplexityRecord:
    """The complexity measures of the training split (:func:`aihpc.recommend.complexity.measure`),
    once per worker and data set.

    Measured on a class-stratified sample of at most ``MAX_SAMPLES`` of the
    training samples already on ``device``; only that sample goes to the CPU.
    """
    from aihpc.recommend.complexity import MAX_SAMPLES, measure, stratified_sample

    if (ref, device) not in _COMPLEXITY:
        train = stage(kind, ref, device).train
        labels = train.y.cpu().numpy()
        idx = stratified_sample(labels, MAX_SAMPLES, ref.seed)
        sample = train.x[torch.as_tensor(idx, device=train.x.device)].float().cpu().numpy()
        _COMPLEXITY[ref, device] = measure(
            sample, labels[idx], seed=ref.seed, name=ref.name, num_samples=len(labels)
        )
    return _COMPLEXITY[ref, device]


@functools.cache
def _matcher() -> Matcher:
    from aihpc.recommend.matcher import load

    return load()
