"""Benchmark: does growing a language model from its trained parent beat training from scratch?

The search's premise for the language task: a child that starts from its
parent's trained weights (the growth operators keep the function exactly)
reaches a lower loss, for the same operations, than a network trained from
scratch.  Three schedules, each trained through the worker's own trainer
(:func:`aihpc.train.worker.run_epoch`) on the synthetic language of the CPU
default, operations counted as a run counts them:

* ``grown``: the seed, then ``--steps`` children, each one random growth step
  (:func:`aihpc.tasks.language.morphism.random_lm_plan`) of the one before, each
  trained ``--epochs`` epochs from its parent's weights (a fresh optimizer
  re-warmed, as in a run);
* ``seed``: the seed trained from scratch until it has spent the grown
  lineage's operations;
* ``final``: the lineage's last architecture trained from scratch until the
  same operations.

They run one after another in this process, with one worker's threads;
seeds ``--seeds``; the validation loss at the end, against the unigram and
bigram losses and the floor.  Prints a table, writes JSON with ``--out``.
The language's size: ``--epoch-tokens`` an epoch, ``--train-tokens`` in all
(the CPU default's epoch; a quarter of its data).

    python benchmarks/lm_growth.py [--seeds 0 1 2] [--steps 4] [--epochs 2] [--threads 2]
        [--epoch-tokens 262144] [--train-tokens 2097152]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_main import script

from aihpc.records.messages import DataRef, EpochTask, Morph
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of

LM = task_of("lm")
DOC_LENGTH, EPOCH_TOKENS, TRAIN_TOKENS = 128, 1 << 18, 1 << 21
HPARAMS = Hyperparameters(lr=2e-3, batch_size=16, weight_decay=0.05, optimizer="adamw", warmup=0.1)


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=4, help="growth steps of the lineage")
    ap.add_argument("--epochs", type=int, default=2, help="epochs each network of it trains")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epoch-tokens", type=int, default=EPOCH_TOKENS, help="tokens an epoch trains on")
    ap.add_argument("--train-tokens", type=int, default=TRAIN_TOKENS, help="the training split's tokens")
    ap.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = ap.parse_args(argv)
    options = (("doc_length", DOC_LENGTH), ("epoch_tokens", args.epoch_tokens), ("train_tokens", args.train_tokens))
    data = DataRef("synthetic", options=options, task="lm")
    info = LM.inspect_data(_config(options), "cpu")
    rows = [measure(seed, args, data, info) for seed in args.seeds]
    print(table(rows, info))
    if args.out:
        args.out.write_text(json.dumps({"data": _losses(info), "rows": rows}, indent=2) + "\n")
    return 0


def _config(options: tuple[tuple[str, int], ...]):
    from aihpc.tasks import read_config

    return LM.default_workload(read_config(dict(task="lm", data_options=dict(options))), "cpu")


def _losses(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info.get(k) for k in ("floor", "bigram_loss", "unigram_loss", "context")}


def measure(seed: int, args: argparse.Namespace, data: DataRef, info: dict[str, Any]) -> dict[str, Any]:
    """The three schedules for one seed: their final validation losses and operations."""
    with tempfile.TemporaryDirectory() as tmp:
        lineage, grown = train_lineage(LM.seed_arch(info), args, data, Path(tmp), seed)
        budget = grown["ops"]
        seed_only = train_to_budget(lineage[0], budget, args, data, Path(tmp), seed, trial=100)
        final = train_to_budget(lineage[-1], budget, args, data, Path(tmp), seed, trial=200)
    row = {"seed": seed, "grown": grown, "seed_only": seed_only, "final_from_scratch": final}
    print(
        f"seed {seed}: grown {grown['val_loss']:.4f}, seed {seed_only['val_loss']:.4f}, "
        f"final {final['val_loss']:.4f} nats/token at {budget / 1e12:.2f} TOPs",
        flush=True,
    )
    return row


def _task(
    arch, trial: int, epoch: int, epochs: int, data: DataRef, tmp: Path, seed: int, **more
) -> EpochTask:
    return EpochTask(
        trial_id=trial,
        epoch=epoch,
        epochs=epochs,
        arch=arch.to_dict(),
        hparams=HPARAMS,
        data=data,
        deadline=time.time() + 3600,
        seed=seed,
        weights_dir=str(tmp),
        device="cpu",
        **more,
    )


def _epoch(task: EpochTask, threads: int):
    from aihpc.train.worker import run_epoch

    result = run_epoch(LM, EpochTask(**{**task.__dict__, "threads": threads}))
    if result.status != "ok":
        raise SystemExit(
            f"trial {task.trial_id} epoch {task.epoch}: {result.status} {result.reason}"
        )
    return result


def train_lineage(
    seed_arch, args, data: DataRef, tmp: Path, seed: int
) -> tuple[list, dict[str, Any]]:
    """The seed and ``args.steps`` children, each one random growth step of the one before,
    each trained ``args.epochs`` epochs, a child from its parent's last weights through the step
    (replayed by the worker from its recipe, as in a run); the lineage and its figures."""
    lineage, ops, weights, result = [seed_arch], 0, None, None
    rng = random.Random(seed)
    for trial in range(args.steps + 1):
        morph = None
        if trial > 0:
            step_seed = rng.getrandbits(63)
            parent = lineage[-1]
            lineage.append(LM.plan(parent, random.Random(step_seed), None)[0])
            morph = Morph(parent.to_dict(), weights, seed, step_seed, 1, None)
        for epoch in range(1, args.epochs + 1):
            start = dict(start=weights) if epoch > 1 else dict(morph=morph)
            task = _task(lineage[-1], trial, epoch, args.epochs, data, tmp, seed, **start)
            result = _epoch(task, args.threads)
            ops, weights = ops + result.ops, result.weights
    figures = {
        "ops": ops,
        "val_loss": result.metrics["val_loss"],
        "params": lineage[-1].num_params(),
    }
    return lineage, figures


def train_to_budget(
    arch, budget: int, args, data: DataRef, tmp: Path, seed: int, trial: int
) -> dict[str, Any]:
    """``arch`` from scratch, epoch after epoch (a cosine schedule over the epochs the budget
    buys, estimated from the first), until its operations reach ``budget``."""
    first = _epoch(_task(arch, trial, 1, 1, data, tmp, seed), args.threads)
    epochs = max(1, round(budget / first.ops))
    ops, weights, result = 0, None, None
    for epoch in range(1, epochs + 1):
        start = dict(start=weights) if weights else {}
        result = _epoch(
            _task(arch, trial + 1, epoch, epochs, data, tmp, seed, **start), args.threads
        )
        ops, weights = ops + result.ops, result.weights
    return {
        "ops": ops,
        "val_loss": result.metrics["val_loss"],
        "epochs": epochs,
        "params": arch.num_params(),
    }


def table(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    losses = _losses(info)
    lines = [
        f"synthetic language: floor {losses['floor']:.4f}, bigram {losses['bigram_loss']:.4f}, "
        f"unigram {losses['unigram_loss']:.4f} nats/token; context {losses['context']}",
        "",
        f"{'seed':>4}  {'grown':>8}  {'seed only':>9}  {'final, scratch':>14}  {'TOPs':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r['seed']:>4}  {r['grown']['val_loss']:8.4f}  {r['seed_only']['val_loss']:9.4f}  "
            f"{r['final_from_scratch']['val_loss']:14.4f}  {r['grown']['ops'] / 1e12:6.2f}"
        )
    for key in ("grown", "seed_only", "final_from_scratch"):
        values = [r[key]["val_loss"] for r in rows]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        lines.append(f"mean {key}: {statistics.mean(values):.4f} ± {spread:.4f}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
