"""``aihpc recommend``: recommend a CNN for an image-classification task without training it.

Three forms:

* ``aihpc recommend --dataset D [--data-path P] [--data-option K=V ...]
  [--candidates small|matched|zoo|FILE] [--budget-ops N] [--margin M]``
  measures the task's complexity and each candidate's zero-cost proxies,
  checks that the task lies in the matcher's calibrated domain, predicts
  accuracy with an interval (or, outside the domain, ranks by synflow
  alone) and prints the ranked table and the recommendation.  Trains nothing.
* ``aihpc recommend calibrate [--seed S] [--steps N] [--workers W]
  [--observations FILE] [--matcher-out FILE]`` trains the candidates
  briefly on the calibration tasks and fits the matcher (the shipped one
  was made by this command, see its provenance); with ``--observations``
  it refits from a saved calibration result without training.
* ``aihpc recommend validate [--seeds 2] [--workers W] [--fast]`` judges the
  recommender on held-out tasks of every family, refitted without that
  family (Kendall tau, regret of the pick, baselines, interval coverage).

Bad input (a data set too small or with one class, candidates that do not
fit, a candidates file that does not parse) is one line and exit 2.
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import ConfigError
from aihpc.cli.output import emit

if TYPE_CHECKING:  # pragma: no cover
    from aihpc.recommend.study import Observation

#: Torch threads for every form.  On this project's shared 2-core CPU, 100
#: training steps of a 29k-parameter candidate at 1x8x8 took 3 s with one
#: thread and 51 s with two under load: small kernels gain nothing from a
#: second thread and lose much when the other core is busy.
THREADS = 1
STEPS = 100
"""Training steps per candidate: :data:`aihpc.recommend.tasks.STEPS` (not imported: torch)."""
MARGIN = 0.01
"""Accuracy a cheaper pick may give up: :data:`aihpc.recommend.ranking.MARGIN`."""
GIVEN = "_given"
"""The attribute of the parsed options naming those given on the command line."""


class _Noted(argparse.Action):
    """An action that also notes, on the parsed options, that its option was given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        _note(namespace, self.dest)


class _Given(_Noted, argparse._StoreAction):
    """Store the value and note that it was given (not defaulted)."""


class _GivenTrue(_Noted, argparse._StoreTrueAction):
    """``store_true`` that notes that it was given."""


def _note(namespace: argparse.Namespace, dest: str) -> None:
    setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {dest})


if TYPE_CHECKING:  # typeshed's generic; argparse's own class takes no type argument
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class _Forms(_SubParsers):
    """The forms: each has its own defaults, and an option of every form given before the
    form's name (``recommend --seed 3 calibrate``) is kept unless the form's own gives it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        before: frozenset[str] = getattr(namespace, GIVEN, frozenset())
        kept = {dest: getattr(namespace, dest) for dest in before}
        vars(namespace).pop(GIVEN, None)
        super().__call__(parser, namespace, values, option_string)
        own: frozenset[str] = getattr(namespace, GIVEN, frozenset())
        for dest, value in kept.items():
            if dest not in own:
                setattr(namespace, dest, value)
        setattr(namespace, GIVEN, before | own)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``aihpc recommend`` and its ``calibrate``/``validate`` forms."""
    parser.add_argument(
        "--dataset", metavar="NAME", help="data set name (digits, synthetic, npz, imagefolder)"
    )
    parser.add_argument(
        "--data-path", metavar="P", type=Path, default=None, help="data set path (npz, imagefolder)"
    )
    parser.add_argument(
        "--data-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the data set's reader, e.g. image_size=32 or channels=1 "
        "(repeatable; VALUE is read as JSON where it parses, else as text)",
    )
    parser.add_argument(
        "--candidates",
        default="small",
        metavar="SET|FILE",
        help="small (default; sizes differ widely), matched (about one size), zoo, "
        "or a JSON candidates file",
    )
    parser.add_argument(
        "--budget-ops",
        type=float,
        default=None,
        metavar="N",
        help="only candidates needing at most N training operations per sample",
    )
    parser.add_argument(
        "--matcher",
        type=Path,
        default=None,
        metavar="FILE",
        help="a fitted matcher file (default: the one shipped with aihpc)",
    )
    _common(parser, seed=0, out="recommend.json")
    sub = parser.add_subparsers(
        dest="form", metavar="{calibrate,validate}", required=False, action=_Forms
    )
    _calibrate_arguments(
        sub.add_parser("calibrate", help="fit the matcher on briefly trained candidates")
    )
    _validate_arguments(
        sub.add_parser("validate", help="judge the matcher on held-out tasks against baselines")
    )


def _calibrate_arguments(cal: argparse.ArgumentParser) -> None:
    """The options of ``aihpc recommend calibrate``."""
    cal.add_argument(
        "--steps",
        type=int,
        default=STEPS,
        action=_Given,
        help=f"training steps per candidate (default {STEPS})",
    )
    cal.add_argument(
        "--seeds", type=int, default=1, help="training seeds per candidate (default 1)"
    )
    cal.add_argument(
        "--observations",
        type=Path,
        default=None,
        metavar="FILE",
        help="refit from the observations of a recommend-calibration result file; trains nothing",
    )
    _workers(cal)
    cal.add_argument(
        "--matcher-out",
        type=Path,
        default=Path("recommend-matcher.json"),
        metavar="FILE",
        help="where to write the fitted matcher (default recommend-matcher.json)",
    )
    _common(cal, seed=0, out="recommend-calibration.json")


def _validate_arguments(val: argparse.ArgumentParser) -> None:
    """The options of ``aihpc recommend validate``."""
    val.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"training steps per candidate (default {STEPS}; 5 with --fast)",
    )
    val.add_argument(
        "--seeds", type=int, default=2, help="training seeds per candidate (default 2, >= 2)"
    )
    val.add_argument(
        "--calibration",
        type=Path,
        default=None,
        metavar="FILE",
        help="the recommend-calibration result whose observations are refitted without "
        "each family (default: the calibration shipped with aihpc)",
    )
    val.add_argument(
        "--observations",
        type=Path,
        default=None,
        metavar="FILE",
        help="judge the held-out observations saved in a recommend-validation result file "
        "again (e.g. with another --calibration or --margin); trains nothing",
    )
    val.add_argument(
        "--fast",
        action="store_true",
        help="a seconds-long smoke run: one task, 3 candidates per set, 5 steps",
    )
    _workers(val)
    _common(val, seed=100, out="recommend-validation.json")


def _workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="tasks observed at once, one process and torch thread each "
        "(default: up to 2, the CPUs here)",
    )


def _data_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; VALUE is JSON where it parses (32, 0.5, [16, 16]) or text."""
    import json

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--data-option must be KEY=VALUE, got {item!r}")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    return options


def _common(parser: argparse.ArgumentParser, seed: int, out: str) -> None:
    """Options of every form, with the form's defaults (each notes when it is given: see
    :class:`_Forms`)."""
    parser.add_argument(
        "--seed", type=int, default=seed, action=_Given, help=f"seed (default {seed})"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=MARGIN,
        action=_Given,
        help=f"accuracy a cheaper pick may give up against the best prediction (default {MARGIN})",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=Path(out),
        action=_Given,
        help=f"the versioned JSON result file (default: {out})",
    )
    parser.add_argument(
        "--json",
        action=_GivenTrue,
        help="print the JSON document instead of the table",
    )


def _check(args: argparse.Namespace) -> None:
    for name in ("steps", "seeds", "seed", "workers"):
        value = getattr(args, name, None)
        low = {"steps": 1, "seeds": 2 if args.form == "validate" else 1, "seed": 0, "workers": 1}[
            name
        ]
        if value is not None and value < low:
            raise ConfigError(f"--{name} must be >= {low}, got {value}")
    if not 0 <= args.margin <= 1:
        raise ConfigError(f"--margin must be in [0, 1], got {args.margin}")
    if getattr(args, "budget_ops", None) is not None and args.budget_ops <= 0:
        raise ConfigError(f"--budget-ops must be > 0, got {args.budget_ops:g}")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the form asked for."""
    _check(args)
    if args.form is None and args.dataset is None:
        raise ConfigError("give --dataset NAME (or the form: aihpc recommend calibrate|validate)")
    import torch

    torch.set_num_threads(THREADS)
    if args.form == "calibrate":
        return _calibrate(args)
    if args.form == "validate":
        return _validate(args)
    return _recommend(args)


def _recommend(args: argparse.Namespace) -> int:
    from aihpc.recommend import matcher as matching
    from aihpc.recommend.candidates import resolve
    from aihpc.recommend.ranking import rank
    from aihpc.recommend.report import format_recommendation
    from aihpc.recommend.tasks import from_dataset

    matcher = matching.load(args.matcher)
    task = from_dataset(
        args.dataset, args.data_path, seed=args.seed, **_data_options(args.data_option)
    )
    candidates = resolve(args.candidates, task.input_shape, task.num_classes)
    rec = rank(
        task,
        candidates,
        matcher,
        margin=args.margin,
        budget_ops=args.budget_ops,
        seed=args.seed,
    )
    return emit(args, "recommend", rec.to_record(), format_recommendation(rec))


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _calibrate(args: argparse.Namespace) -> int:
    import json

    from aihpc.base.fileio import atomic_write
    from aihpc.recommend.calibrate import calibrate, format_matcher, refit
    from aihpc.records.kinds_recommend import CalibrationData

    if args.matcher_out.parent and not args.matcher_out.parent.is_dir():
        raise ConfigError(
            f"cannot write {args.matcher_out}: directory {args.matcher_out.parent} does not exist"
        )
    if args.observations is not None:
        matcher, observations = refit(args.observations, _calibrate_command(args))
    else:
        matcher, observations = calibrate(
            seed=args.seed,
            steps=args.steps,
            seeds=args.seeds,
            workers=args.workers,
            command=_calibrate_command(args),
            progress=None if args.json else _progress,
        )
    record = matcher.to_record()
    atomic_write(args.matcher_out, json.dumps(matcher.to_dict(), indent=2, sort_keys=True) + "\n")
    data = CalibrationData(matcher=record, observations=tuple(o.to_record() for o in observations))
    return emit(args, "recommend-calibration", data, format_matcher(record, args.matcher_out))


def _calibrate_command(args: argparse.Namespace) -> str:
    """The calibration as a command line, from the parsed options: the matcher's provenance
    (``--seed`` and ``--steps`` where they were given)."""
    parts = ["aihpc", "recommend", "calibrate"]
    given: frozenset[str] = getattr(args, GIVEN, frozenset())
    for flag in ("seed", "steps", "seeds", "workers", "observations", "matcher_out", "out"):
        value = getattr(args, flag)
        if flag in ("seed", "steps") and flag not in given:
            continue
        if value is not None:
            parts += [f"--{flag.replace('_', '-')}", str(value)]
    return shlex.join(parts)


def _calibration(args: argparse.Namespace) -> list[Observation]:
    """The calibration observations the validation refits (a file, or the shipped ones)."""
    from aihpc.recommend.study import observations_of, read_calibration, shipped_calibration

    if args.calibration is not None:
        data = read_calibration(args.calibration)
        return observations_of(data.observations, args.calibration)

    return shipped_calibration()


def _validate(args: argparse.Namespace) -> int:
    from aihpc.recommend.families import validation_tasks
    from aihpc.recommend.validate import format_validation, rejudge_file, validate
    from aihpc.records.kinds_recommend import ValidationData

    margin = args.margin
    calibration = _calibration(args)
    if args.observations is not None:
        result, held_out = rejudge_file(calibration, args.observations, margin=margin)
    else:
        # --fast: one task, 3 candidates per set, 5 steps (unless --steps says otherwise)
        result, held_out = validate(
            calibration,
            seeds=args.seeds,
            steps=args.steps or (5 if args.fast else STEPS),
            base_seed=args.seed,
            margin=margin,
            workers=args.workers,
            progress=None if args.json else _progress,
            specs=validation_tasks()[:1] if args.fast else None,
            limit=3 if args.fast else None,
        )
    data = ValidationData(validation=result, observations=tuple(o.to_record() for o in held_out))
    return emit(args, "recommend-validation", data, format_validation(result))
