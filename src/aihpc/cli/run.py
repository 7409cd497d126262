"""aihpc run: the AutoML benchmark (AIPerf's idea): search, train on the workers, score in OPS."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    _workload_arguments(p)
    _search_arguments(p)
    _batch_arguments(p)
    p.add_argument(
        "--config", metavar="TOML", help="read settings from a TOML file (flags override it)"
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default runs/<time>-<id>)")
    p.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR, keeping every finished trial"
    )
    p.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live console view (default: when stdout is a terminal)",
    )


def _workload_arguments(p: argparse.ArgumentParser) -> None:
    """The budget, the data and where the workers train."""
    p.add_argument("--minutes", type=float, help="time budget of the search (default 5)")
    p.add_argument(
        "--task",
        help="what the search searches: image (default: CNNs classifying images), lm "
        "(decoder-only transformer language models), or another registered task",
    )
    p.add_argument(
        "--dataset",
        help="image: synthetic (default), digits, imagefolder or npz; lm: synthetic (default: a "
        "hidden Markov language with a known floor), text or tokens",
    )
    p.add_argument(
        "--data-path", help="folder or file for imagefolder / npz, or text (a folder) / tokens"
    )
    p.add_argument(
        "--staging",
        choices=["auto", "device", "stream"],
        help="where workers stage the data: whole on the device, or streamed from a node-local "
        "file (default auto: on the device if it fits in half its free memory)",
    )
    p.add_argument(
        "--stage-dir", help="node-local folder for streamed data (default: the temporary folder)"
    )
    p.add_argument(
        "--workers",
        type=int,
        help="number of workers (default: one per GPU, or cores split on CPU)",
    )
    p.add_argument("--threads-per-worker", type=int, help="torch threads per worker")
    p.add_argument("--scheduler", help="address of a running Dask scheduler, tcp://HOST:PORT")
    p.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], help="where workers train (default auto)"
    )


def _search_arguments(p: argparse.ArgumentParser) -> None:
    """The search and how each trial trains."""
    p.add_argument("--seed", type=int, help="seed of the search, the data split and initialisation")
    _task_arguments(p)
    p.add_argument(
        "--strategy",
        help="parent selection: evolution (default), random, none (no architecture search: the "
        "seed retrained with TPE's hyperparameters), or seed (the baseline: the seed trained once "
        "per worker for the whole run with the task's default hyperparameters)",
    )
    _mechanism_arguments(p)
    p.add_argument("--max-params", type=int, help="largest network a child may grow to")
    p.add_argument(
        "--screen",
        type=int,
        metavar="K",
        help="proxy screening: morph K children per new trial, score them untrained with zero-cost "
        "proxies and the recommender's matcher, train the best (default 0: off)",
    )
    p.add_argument(
        "--carry-optimizer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a child's first epoch starts from its parent's optimizer state (momentum; AdamW's "
        "moments and steps) carried through the growth, not a fresh optimizer (default: on)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile each trial's model region by region (a CNN's blocks, a transformer's "
        "blocks), equal and unchanged blocks from the cache (default: the task's choice for the "
        "device, Task.compile_auto)",
    )
    p.add_argument(
        "--procs-per-trial",
        type=int,
        help="processes training each trial data-parallel (gloo on CPU)",
    )
    p.add_argument(
        "--gpus-per-trial",
        type=int,
        dest="procs_per_trial",
        help="GPUs training each trial data-parallel (NCCL); same setting as --procs-per-trial",
    )


#: the search's mechanisms, each on by default and turned off by --no-NAME (RunConfig's fields)
MECHANISMS = (
    (
        "lineage_schedule",
        "one learning-rate schedule per lineage, from its root's start to the run's end: a child "
        "continues at its lineage's position, with no new warm-up",
    ),
    (
        "inherit_hparams",
        "a child takes its parent's hyperparameters, its weight decay x0.8 or x1.25 (PBT), "
        "instead of TPE's",
    ),
    (
        "grow_on_plateau",
        "a trial ends when its last 3 epochs improved its best by less than the metric's "
        "standard error, and a child grows towards the size compute-optimal for the time left",
    ),
    (
        "early_stop",
        "asynchronous successive halving: a trial outside the better half of its peers at 1, 2, "
        "4, 8 ... lineage epochs is stopped",
    ),
    (
        "fork_leader",
        "a new trial, while the run's best trial still trains, starts from its latest weights, "
        "with its architecture and its hyperparameters perturbed (PBT's exploit)",
    ),
    (
        "keep_leader",
        "with more than one worker, the run's best trial trains on past its plateau and its epoch "
        "cap, and a freed worker grows a child of its latest weights",
    ),
)


def _task_arguments(p: argparse.ArgumentParser) -> None:
    """The task's own settings: the image task's and the language task's."""
    p.add_argument(
        "--min-accuracy", type=float, help="image: best accuracy below which the run is invalid"
    )
    p.add_argument(
        "--seed-width",
        type=int,
        help="image: the seed network's base width, channels of its first stage (default: by "
        "device and image size; 8 for the CPU's default images)",
    )
    p.add_argument(
        "--shift",
        type=int,
        help="image: the largest random shift of a training image, in pixels (0: none; default: "
        "an eighth of its smaller side, as in the padded random crop of the CIFAR recipe)",
    )
    p.add_argument(
        "--max-val-loss",
        type=float,
        help="lm: best validation loss (nats/token) above which the run is invalid (default: "
        "the data's bigram loss)",
    )


def _mechanism_arguments(p: argparse.ArgumentParser) -> None:
    """The search's mechanisms, --NAME / --no-NAME each."""
    for name, what in MECHANISMS:
        p.add_argument(
            f"--{name.replace('_', '-')}",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{what} (default: on)",
        )


def _batch_arguments(p: argparse.ArgumentParser) -> None:
    """Workers as batch jobs."""
    batch = p.add_argument_group("batch systems (SLURM, PBS, LSF)")
    which = batch.add_mutually_exclusive_group()
    which.add_argument(
        "--slurm",
        dest="batch_system",
        action="store_const",
        const="slurm",
        help="workers as SLURM jobs; inside an allocation (srun), its tasks are the workers",
    )
    which.add_argument(
        "--pbs", dest="batch_system", action="store_const", const="pbs", help="workers as PBS jobs"
    )
    which.add_argument(
        "--lsf", dest="batch_system", action="store_const", const="lsf", help="workers as LSF jobs"
    )
    batch.add_argument("--nodes", type=int, help="nodes to spread the workers over (default 1)")
    batch.add_argument(
        "--gpus-per-node", type=int, help="GPUs per node, one worker each (default 0: CPU)"
    )
    batch.add_argument("--partition", help="partition (SLURM) or queue (PBS, LSF)")
    batch.add_argument(
        "--time", dest="walltime", help="time limit of each worker job, e.g. 01:00:00"
    )
    batch.add_argument(
        "--worker-memory",
        help="memory limit of each worker, e.g. 8GiB (default: its node's memory less a reserve, "
        "divided among the node's workers)",
    )
    batch.add_argument(
        "--interface", help="network interface of scheduler and workers, e.g. ib0 (default: all)"
    )
    batch.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="TLS between scheduler and workers (default: on for batch jobs)",
    )


#: the flags of the command itself; every other flag sets the setting of its name
COMMAND_FLAGS = ("config", "out", "resume", "live", "help")
#: what aihpc's entry point sets on every command's arguments (aihpc.cli): no flag of this one's
PARSER_NAMES = ("command", "_module")
#: settings given in a TOML file only (tests/cli/test_config_flags.py holds the two lists to the
#: parser and to the settings of the sections and of every task: a new setting needs a flag or a
#: place here, a new flag a setting or COMMAND_FLAGS)
TOML_ONLY = (
    "batch_sizes",
    "context",
    "data_options",
    "epoch_tokens",
    "epochs_max",
    "epochs_min",
    "hpo_processes",
    "max_attempts",
    "optimizer",
    "patience",
    "peak_seconds",
    "population",
    "report_seconds",
    "schedule",
    "seed_network",
    "tournament",
)


def config_flags(args: argparse.Namespace) -> dict[str, object]:
    """The settings the command line set (flags override the TOML file): every flag's but the
    command's own, by the name of the setting it sets."""
    return {
        name: value
        for name, value in vars(args).items()
        if name not in (*COMMAND_FLAGS, *PARSER_NAMES) and value is not None
    }


def _merged(values: dict[str, object], flags: dict[str, object]) -> dict[str, object]:
    """The TOML file's settings with the flags' over them: a flag replaces the setting of its
    name wherever the file gives it (at its top, or in its section's table)."""
    from aihpc.base.config import SECTIONS, task_name

    tables = {*SECTIONS, task_name({**values, **flags})}
    merged = {
        k: {n: v for n, v in table.items() if n not in flags}
        if k in tables and isinstance(table, dict)
        else table
        for k, table in values.items()
    }
    return {**merged, **flags}


def run(args: argparse.Namespace) -> int:
    from aihpc.base.config import load_toml
    from aihpc.base.errors import ConfigError
    from aihpc.tasks import read_config

    # the settings are checked before the runner (torch, dask) is imported: a mistake in them
    # is said at once
    values = load_toml(args.config) if args.config else {}
    source = args.config or "config"
    flags = config_flags(args)
    config = read_config(_merged(values, flags), source=source)
    if args.resume and args.out:
        raise ConfigError(f"--resume continues the run in its own directory; drop --out {args.out}")

    from aihpc.launch.slurm import in_allocation, runner_context
    from aihpc.runner.display.console import Console
    from aihpc.runner.display.summary import summary_lines
    from aihpc.runner.run import default_run_dir, run_benchmark

    run_dir = Path(args.resume or args.out or default_run_dir())
    console = Console(live=args.live)
    if config.launch.batch_system == "slurm" and in_allocation():
        # Under srun every task runs this: rank 0 gets a client and runs the
        # master; every other rank serves one worker and exits in runner_context.
        with runner_context(
            interface=config.launch.interface,
            tls=config.launch.tls is not False,
            gpus_per_worker=config.launch.procs_per_trial,
            worker_memory=config.launch.worker_memory,
        ) as client:
            written = run_benchmark(
                config, run_dir, resume=bool(args.resume), console=console, client=client
            )
    else:
        written = run_benchmark(config, run_dir, resume=bool(args.resume), console=console)
    for line in summary_lines(written.head, written.trials, run_dir):
        print(line)
    return 0
