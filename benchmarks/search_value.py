"""Benchmark: what the search is worth — the best quality it reaches against not searching, at
equal time on the same machine (issue 42).

For each task (``--tasks image,lm``), ``aihpc run`` is run one run after another, in stages:

``short``      at ``--short-minutes`` (3), seeds ``--seeds`` (5): (a) ``default`` (aihpc's search
               as it ships), (b) ``hpo`` (``--strategy none``: every trial trains the seed afresh,
               only its hyperparameters searched), (c) ``seed`` (``--strategy seed``: the seed
               trained once per worker for the whole budget, the task's default hyperparameters,
               one schedule), (d) ``random`` (``--strategy random``: a random parent)
``ablations``  at the short minutes, the first ``--ablation-seeds`` (3) seeds: the default with
               each of its mechanisms turned off in turn (``--no-carry-optimizer`` ...)
``long``       at ``--long-minutes`` (15), the first ``--long-seeds`` (3) seeds: (a), (b), (c)
``workers``    at the short minutes, the first 3 seeds: the default on one single-threaded
               worker, beside (a) on every worker of the machine (AIPerf's premise: more machine,
               a better model)

Runs are interleaved (every configuration of one seed before the next seed), so that a machine
that slows down part-way slows every configuration alike.  Each finished run's figures are kept in
``DIR/state.json`` as it ends (its run directory is deleted unless ``--keep``), and a later call
with the same ``DIR`` runs only what is missing: the whole benchmark takes hours of a small
machine, so run it in the background and read the partial tables as they grow (``--report``
reads ``state.json`` and runs nothing).

A run is timed by the clock, so other work on the machine costs it epochs.  Each run keeps the
share of the machine's CPU that processes outside its session took while it ran
(``foreign_cpu``), and a later call makes again every kept run over ``--max-foreign`` (5 %), or
kept without that reading.  To test beside it, lower the other work's whole session group
(``echo 19 > /proc/self/autogroup`` in a new session): a ``nice`` inside the default group does
not yield to another group.

The figures of a run: its best quality (image: validation accuracy, higher better; language:
validation loss in nats per token, lower better), its operations, and its trajectory — the best
quality so far against the operations counted so far, epoch by epoch in the order they ended.
The table gives, per task, stage and configuration, the mean ± standard deviation over seeds, the
difference to (a), that difference over its standard error, and Welch's t-test's p-value, then the
same paired seed by seed (the mean of the per-seed differences, its standard error, the paired
t-test's p-value: a seed sets the data of every configuration alike); for the
language task, the share of (c)'s operations that (a) needed to reach (c)'s final loss, seed by
seed.  It is written as Markdown (``DIR/search-value.md``, and ``--page FILE`` too: a dated page
for the documentation's measurements), and a plot of best quality against operations per stage
(``DIR/search-value-TASK-STAGE.png``).

    python benchmarks/search_value.py DIR [--tasks image,lm] [--stages short,ablations,long,workers]
        [--configs NAMES] [--seeds 5] [--short-minutes 3] [--long-minutes 15] [--keep] [--report]
        [--page FILE]
        [-- more aihpc run arguments]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import read_run
from bench_main import script
from machine_cpu import machine_busy_seconds

TASKS = ("image", "lm")
STAGES = ("short", "ablations", "long", "workers")
# the configurations: name -> aihpc run arguments
BASELINES = {
    "default": [],
    "hpo": ["--strategy", "none"],
    "seed": ["--strategy", "seed"],
    "random": ["--strategy", "random"],
}
MECHANISMS = (
    "carry-optimizer",
    "lineage-schedule",
    "inherit-hparams",
    "grow-on-plateau",
    "early-stop",
    "fork-leader",
    "keep-leader",
)
# the image task's own: its training images unshifted (aihpc.tasks.image.augment)
IMAGE_ONLY = {"no-shift": ["--shift", "0"]}
ABLATIONS = {**{f"no-{m}": [f"--no-{m}"] for m in MECHANISMS}, **IMAGE_ONLY}
ONE_WORKER = {"one-worker": ["--workers", "1", "--threads-per-worker", "1"]}
LONG = ("default", "hpo", "seed")
STAGE_CONFIGS = {
    "short": BASELINES,
    "ablations": ABLATIONS,
    "long": {k: BASELINES[k] for k in LONG},
    "workers": ONE_WORKER,
}
# the configuration every other one of its stage is compared with
REFERENCE = "default"


@dataclass(frozen=True)
class Run:
    """One planned run."""

    task: str
    stage: str
    config: str
    seed: int
    minutes: float

    @property
    def key(self) -> str:
        return f"{self.task}/{self.stage}/{self.config}/{self.seed}/{self.minutes:g}"

    def arguments(self, extra: list[str]) -> list[str]:
        configs = {**BASELINES, **ABLATIONS, **ONE_WORKER}
        return ["--task", self.task, "--seed", str(self.seed), *configs[self.config], *extra]


def plan(args: argparse.Namespace) -> list[Run]:
    """Every run of the stages asked for, interleaved: each seed's configurations together."""
    runs: list[Run] = []
    for task in args.tasks:
        for stage in args.stages:
            minutes = args.long_minutes if stage == "long" else args.short_minutes
            seeds = {"short": args.seeds, "long": args.long_seeds}.get(stage, args.ablation_seeds)
            configs = [
                c
                for c in STAGE_CONFIGS[stage]
                if (not args.configs or c in args.configs) and (task == "image" or c not in IMAGE_ONLY)
            ]
            for seed in range(seeds):
                runs += [Run(task, stage, c, seed, minutes) for c in configs]
    return runs


# -------------------------------------------------------------------------- a run's figures


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """What the tables and plots need of one run's results.json."""
    task = results["config"].get("task", "image")  # documents from before the language task
    metric, lower = ("val_loss", True) if task == "lm" else ("val_accuracy", False)
    epochs = sorted((e for t in results["trials"] for e in t["epochs"]), key=lambda e: e["t_end"])
    trajectory, ops, best = [], 0, None
    for e in epochs:
        ops += int(e["ops"])
        value = e.get(metric) if e["status"] == "ok" else None
        if value is not None and (best is None or (value < best if lower else value > best)):
            best = value
            trajectory.append([ops, best])
    seed_only = [
        t for t in results["trials"] if t.get("parent") is None and t.get("morph") == "seed"
    ]
    seed_values = [e.get(metric) for t in seed_only for e in t["epochs"] if e["status"] == "ok"]
    seed_values = [v for v in seed_values if v is not None]
    return {
        "best": best,
        "lower_is_better": lower,
        "ops": int(results["score"]["ops"]),
        "seconds": results["score"]["wall_seconds"],
        "trials": len(results["trials"]),
        "seed_only_best": (min if lower else max)(seed_values) if seed_values else None,
        "trajectory": trajectory,
        "valid": results["score"].get("valid"),
    }


def session_cpu_seconds(session: int) -> dict[int, float]:
    """CPU seconds of each live process of ``session`` (``/proc/PID/stat``)."""
    tick, seconds = os.sysconf("SC_CLK_TCK"), {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # the process ended while it was read
            continue
        if int(fields[3]) == session:
            seconds[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def run_one(run: Run, root: Path, extra: list[str], keep: bool) -> dict[str, Any]:
    """``aihpc run`` of ``run`` (its output discarded); its figures, and the share of the
    machine's CPU that other processes took while it ran (``foreign_cpu``)."""
    out = root / "runs" / run.key.replace("/", "-")
    if out.exists():  # a run that did not finish before an earlier call stopped: start it again
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "aihpc", "run", "--minutes", f"{run.minutes:g}", "--out", str(out),
           "--no-live", *run.arguments(extra)]  # fmt: skip
    busy, started = machine_busy_seconds(), time.monotonic()
    own: dict[int, float] = {}  # the run's processes (its session): their CPU seconds last seen
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: it never fills and blocks
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        while proc.poll() is None:
            own |= session_cpu_seconds(proc.pid)
            time.sleep(1)
        err.seek(0)
        stderr = err.read()
    foreign = machine_busy_seconds() - busy - sum(own.values())
    capacity = (os.cpu_count() or 1) * (time.monotonic() - started)
    if proc.returncode not in (0, 1):  # 1: a run that finished INVALID still has its figures
        raise SystemExit(f"search_value: {' '.join(cmd)} failed ({proc.returncode}): "
                         f"{stderr.strip()[-2000:]}")  # fmt: skip
    result = {**figures(read_run(out)), "foreign_cpu": max(0.0, foreign / capacity)}
    if not keep:
        shutil.rmtree(out)
    return result


def load_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def save_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


# -------------------------------------------------------------------------- the statistics


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def compare(ref: list[float], other: list[float]) -> dict[str, float | None]:
    """``other`` against ``ref``: the difference of the means, its standard error, and Welch's
    t-test's two-sided p-value (None where a sample has fewer than two values or no spread)."""
    diff = statistics.fmean(other) - statistics.fmean(ref)
    if len(ref) < 2 or len(other) < 2:
        return {"diff": diff, "se": None, "p": None}
    se = math.sqrt(statistics.variance(ref) / len(ref) + statistics.variance(other) / len(other))
    if se == 0:
        return {"diff": diff, "se": 0.0, "p": None}
    from scipy.stats import ttest_ind

    return {"diff": diff, "se": se, "p": float(ttest_ind(other, ref, equal_var=False).pvalue)}


def paired(ref: dict[int, float], other: dict[int, float]) -> dict[str, float | None]:
    """``other`` against ``ref`` seed by seed (the seeds both have: the same data, the same
    initial network): the mean difference, its standard error, and the paired t-test's
    two-sided p-value (None where fewer than two seeds pair or the differences do not spread).
    A seed changes the data as well, so pairing removes the spread that seeds add to both."""
    seeds = sorted(set(ref) & set(other))
    diffs = [other[s] - ref[s] for s in seeds]
    if len(diffs) < 2:
        return {"diff": statistics.fmean(diffs) if diffs else None, "se": None, "p": None}
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if se == 0:
        return {"diff": statistics.fmean(diffs), "se": 0.0, "p": None}
    from scipy.stats import ttest_rel

    p = float(ttest_rel([other[s] for s in seeds], [ref[s] for s in seeds]).pvalue)
    return {"diff": statistics.fmean(diffs), "se": se, "p": p}


def ops_to_reach(trajectory: list[list[float]], target: float, lower: bool) -> int | None:
    """The operations after which the run's best first reached ``target`` (None: never)."""
    for ops, best in trajectory:
        if (best <= target) if lower else (best >= target):
            return int(ops)
    return None


# -------------------------------------------------------------------------- the report


def groups(state: dict[str, Any]) -> dict[tuple[str, str, float], dict[str, dict[int, Any]]]:
    """(task, stage, minutes) -> configuration -> seed -> figures."""
    out: dict[tuple[str, str, float], dict[str, dict[int, Any]]] = {}
    for key, fig in state.items():
        task, stage, config, seed, minutes = key.split("/")
        out.setdefault((task, stage, float(minutes)), {}).setdefault(config, {})[int(seed)] = fig
    return out


def reference_of(state: dict[str, Any], task: str, stage: str, minutes: float) -> dict[int, Any]:
    """The runs of (a) that a stage is compared with: its own, or (a) at the same minutes."""
    table = groups(state)
    own = table.get((task, stage, minutes), {}).get(REFERENCE)
    if own:
        return own
    return table.get((task, "short", minutes), {}).get(REFERENCE, {})


def quality(value: float, lower: bool) -> str:
    return f"{value:.4f}" if lower else f"{100 * value:.2f} %"


def difference(value: float, lower: bool) -> str:
    return f"{value:+.4f}" if lower else f"{100 * value:+.2f} pt"


def stage_table(state: dict[str, Any], task: str, stage: str, minutes: float) -> list[str]:
    """One stage's table: each configuration's best quality over seeds, against (a)'s."""
    configs = groups(state)[(task, stage, minutes)]
    ref = reference_of(state, task, stage, minutes)
    lower = next(iter(next(iter(configs.values())).values()))["lower_is_better"]
    what = "best validation loss, nats/token" if lower else "best validation accuracy"
    lines = [f"### {task}, {stage}, {minutes:g} minutes ({what})", "",
             "| configuration | runs | best (mean ± sd) | to (a) | over its s.e. | Welch p | "
             "paired: to (a) | over its s.e. | paired p | trials (mean) | ops (mean) |",
             "|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, runs in [(REFERENCE, ref), *[(n, r) for n, r in configs.items() if n != REFERENCE]]:
        values = [f["best"] for f in runs.values() if f["best"] is not None]
        if not values:
            lines.append(f"| {name} | {len(runs)} | no quality measured | | | | | | | | |")
            continue
        m, sd = mean_sd(values)
        ref_values = [f["best"] for f in ref.values() if f["best"] is not None]
        cells = [""] * 6
        if name != REFERENCE and ref_values:
            by_seed = {s: f["best"] for s, f in runs.items() if f["best"] is not None}
            ref_by_seed = {s: f["best"] for s, f in ref.items() if f["best"] is not None}
            cells = [*_cells(compare(ref_values, values), lower),
                     *_cells(paired(ref_by_seed, by_seed), lower)]  # fmt: skip
        trials = statistics.fmean(f["trials"] for f in runs.values())
        ops = statistics.fmean(f["ops"] for f in runs.values())
        lines.append(f"| {name} | {len(values)} | {quality(m, lower)} ± {quality(sd, lower)} | "
                     f"{' | '.join(cells)} | {trials:.1f} | {ops:.3g} |")  # fmt: skip
    return lines


def _cells(c: dict[str, float | None], lower: bool) -> list[str]:
    """A comparison's cells: the difference, it over its standard error, the p-value."""
    diff, se, p = c["diff"], c["se"], c["p"]
    return ["-" if diff is None else difference(diff, lower),
            "-" if not se or diff is None else f"{diff / se:+.1f}",
            "-" if p is None else f"{p:.3f}"]  # fmt: skip


def savings(state: dict[str, Any], task: str, stage: str, minutes: float) -> list[str]:
    """Seed by seed: the share of (c)'s operations that (a) needed to reach (c)'s final best."""
    configs = groups(state).get((task, stage, minutes), {})
    a, c = configs.get(REFERENCE, {}), configs.get("seed", {})
    shares = []
    for seed in sorted(set(a) & set(c)):
        target = c[seed]["best"]
        if target is not None:
            ops = ops_to_reach(a[seed]["trajectory"], target, a[seed]["lower_is_better"])
            shares.append(None if ops is None else ops / c[seed]["ops"])
    if not shares:
        return []
    text = ", ".join("never" if s is None else f"{100 * s:.0f} %" for s in shares)
    return [f"(a) reached (c)'s final best after {text} of (c)'s operations (seed by seed).", ""]


def report(state: dict[str, Any]) -> str:
    """The whole report: every stage's table, and the language task's operations saved."""
    when = time.strftime("%Y-%m-%d", time.gmtime())
    lines = [f"# The search's value ({when})", "",
             f"`benchmarks/search_value.py`: {len(state)} runs. (a) is `default`; each difference "
             "is to (a)'s mean, over its standard error (Welch), and seed by seed (paired: a "
             "seed sets the data and the first network of every configuration alike).",
             ""]  # fmt: skip
    for task, stage, minutes in sorted(
        groups(state), key=lambda k: (k[0], STAGES.index(k[1]), k[2])
    ):
        lines += stage_table(state, task, stage, minutes) + [""]
        lines += savings(state, task, stage, minutes)
    return "\n".join(lines).rstrip() + "\n"


def plot(state: dict[str, Any], folder: Path) -> list[Path]:
    """Best quality against operations, each configuration's mean over its seeds (on the
    operations every one of its runs reached), per task and stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for (task, stage, minutes), configs in groups(state).items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        lower = False
        for name, runs in sorted(configs.items()):
            curves = [f["trajectory"] for f in runs.values() if f["trajectory"]]
            if not curves:
                continue
            lower = next(iter(runs.values()))["lower_is_better"]
            end = min(c[-1][0] for c in curves)
            grid = [end * (i + 1) / 100 for i in range(100)]
            mean = [statistics.fmean(_at(c, x) for c in curves) for x in grid]
            ax.plot(grid, mean, label=f"{name} ({len(curves)})")
        ax.set_xlabel("operations counted")
        ax.set_ylabel("best validation loss" if lower else "best validation accuracy")
        ax.set_title(f"{task}, {stage}, {minutes:g} minutes: mean over seeds")
        ax.legend()
        path = folder / f"search-value-{task}-{stage}-{minutes:g}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made.append(path)
    return made


def _at(trajectory: list[list[float]], ops: float) -> float:
    """The best so far after ``ops`` operations (the first value before the first epoch)."""
    value = trajectory[0][1]
    for at, best in trajectory:
        if at > ops:
            break
        value = best
    return value


# -------------------------------------------------------------------------- main


def disturbed_runs(state: dict[str, dict[str, Any]], max_foreign: float) -> list[str]:
    """The kept runs to make again: those during which other processes took more than
    ``max_foreign`` of the machine's CPU, and those kept without that reading."""
    return [
        key
        for key, run in state.items()
        if run.get("foreign_cpu") is None or run["foreign_cpu"] > max_foreign
    ]



def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="where state.json, the tables and the plots are kept")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument(
        "--configs", help="only these configurations (comma-separated), e.g. default,seed"
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--ablation-seeds", type=int, default=3)
    ap.add_argument("--long-seeds", type=int, default=3)
    ap.add_argument("--short-minutes", type=float, default=3.0)
    ap.add_argument("--long-minutes", type=float, default=15.0)
    ap.add_argument(
        "--max-foreign", type=float, default=0.05,
        help="make again a kept run during which other processes took more than this share of "
        "the machine's CPU (0.05)",
    )  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep each run's directory")
    ap.add_argument("--report", action="store_true", help="only write the report of state.json")
    ap.add_argument("--page", type=Path, help="also write the report here (a dated docs page)")
    # what follows "--" goes to every `aihpc run` as it is (argparse would not give it to a
    # positional list after the positional DIR)
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    args.tasks = _names(ap, args.tasks, TASKS, "task")
    args.stages = _names(ap, args.stages, STAGES, "stage")
    known = (*BASELINES, *ABLATIONS, *ONE_WORKER)
    args.configs = _names(ap, args.configs, known, "configuration") if args.configs else None
    for name in ("seeds", "ablation_seeds", "long_seeds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for name in ("short_minutes", "long_minutes"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return args


def _names(
    ap: argparse.ArgumentParser, text: str, allowed: tuple[str, ...], what: str
) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in allowed:
            ap.error(f"a {what} is one of {', '.join(allowed)}, got {n!r}")
    return names


@script
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    state_path = args.dir / "state.json"
    state = load_state(state_path)
    if not args.report:
        disturbed = disturbed_runs(state, args.max_foreign)
        for key in disturbed:  # made while other work took the machine: made again
            del state[key]
        todo = [r for r in plan(args) if r.key not in state]
        hours = sum(r.minutes for r in todo) / 60
        print(f"search_value: {len(todo)} runs to make ({len(state)} kept, {len(disturbed)} made "
              f"again: disturbed), about {hours:.1f} hours of run clocks", flush=True)  # fmt: skip
        for i, run in enumerate(todo, 1):
            started = time.time()
            state[run.key] = run_one(run, args.dir, args.extra, args.keep)
            save_state(state_path, state)
            best = state[run.key]["best"]
            print(f"[{i}/{len(todo)}] {run.key}: best {best}, {time.time() - started:.0f} s",
                  flush=True)  # fmt: skip
    if not state:
        print("search_value: no runs kept yet", file=sys.stderr)
        return 1
    text = report(state)
    (args.dir / "search-value.md").write_text(text)
    if args.page:
        args.page.write_text(text)
    plot(state, args.dir)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
