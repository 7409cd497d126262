"""``aihpc recommend``: recommend a CNN for an image-classification task without training it.

Three forms:

* ``aihpc recommend --dataset D [--data-path P] [--candidates small|matched|zoo|FILE]
  [--budget-ops N] [--margin M]`` measures the task's complexity and each
  candidate's zero-cost proxies, predicts accuracy with the fitted matcher
  and prints the ranked table and the recommendation (the cheapest
  candidate predicted within the margin of the best).  Trains nothing.
* ``aihpc recommend calibrate [--seed S] [--steps N] [--matcher-out FILE]``
  trains the candidates briefly on the calibration tasks and fits the
  matcher (the shipped one was made by this command, see its provenance).
* ``aihpc recommend validate [--seeds 3] [--fast]`` judges the matcher on
  held-out tasks (Kendall tau, Spearman rho with bootstrap intervals,
  accuracy lost, baselines, seed agreement).

Bad input (a data set too small or with one class, candidates that do not
fit, a candidates file that does not parse) is one line and exit 2.
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from aihpc.cli.output import emit
from aihpc.errors import ConfigError

#: Torch threads for every form.  On this project's shared 2-core CPU, 100
#: training steps of a 29k-parameter candidate at 1x8x8 took 3 s with one
#: thread and 51 s with two under load: small kernels gain nothing from a
#: second thread and lose much when the other core is busy.
THREADS = 1
DEFAULT_OUT = {None: "recommend.json", "calibrate": "recommend-calibration.json",
               "validate": "recommend-validation.json"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``aihpc recommend`` and its ``calibrate``/``validate`` forms."""
    parser.add_argument("--dataset", metavar="NAME",
                        help="data set name (digits, synthetic, npz, imagefolder)")
    parser.add_argument("--data-path", metavar="P", type=Path, default=None,
                        help="data set path (npz, imagefolder)")
    parser.add_argument("--candidates", default="small", metavar="SET|FILE",
                        help="small (default; sizes differ widely), matched (about one size), zoo, "
                             "or a JSON candidates file")
    parser.add_argument("--budget-ops", type=float, default=None, metavar="N",
                        help="only candidates needing at most N training operations per sample")
    _common(parser, "recommend.json", form=False)
    sub = parser.add_subparsers(dest="form", metavar="{calibrate,validate}", required=False)
    cal = sub.add_parser("calibrate", help="fit the matcher on briefly trained candidates")
    cal.add_argument("--steps", type=int, default=None, help="training steps per candidate (default 100)")
    cal.add_argument("--seeds", type=int, default=1, help="training seeds per candidate (default 1)")
    cal.add_argument("--matcher-out", type=Path, default=Path("recommend-matcher.json"), metavar="FILE",
                     help="where to write the fitted matcher (default recommend-matcher.json)")
    _common(cal, "recommend-calibration.json")
    val = sub.add_parser("validate", help="judge the matcher on held-out tasks against baselines")
    val.add_argument("--steps", type=int, default=None, help="training steps per candidate (default 100)")
    val.add_argument("--seeds", type=int, default=3, help="training seeds per candidate (default 3, >= 2)")
    val.add_argument("--observations", type=Path, default=None, metavar="FILE",
                     help="judge the observations saved in a recommend-validation result file "
                          "again (e.g. with another --matcher); trains nothing")
    val.add_argument("--fast", action="store_true",
                     help="a seconds-long smoke run: one task, 3 candidates per set, 5 steps")
    _common(val, "recommend-validation.json")


def _common(parser: argparse.ArgumentParser, default_out: str, form: bool = True) -> None:
    """Options of every form.  A form's own copies default to SUPPRESS, so the value given
    before or after the form's name is the one used (argparse lets a subparser's defaults
    overwrite the parent's)."""
    default = argparse.SUPPRESS if form else None
    parser.add_argument("--seed", type=int, default=default, help="seed (default 0; validate: 100)")
    parser.add_argument("--margin", type=float, default=default,
                        help="accuracy a cheaper pick may give up against the best prediction (default 0.02)")
    parser.add_argument("--matcher", type=Path, default=default, metavar="FILE",
                        help="a fitted matcher file (default: the one shipped with aihpc)")
    parser.add_argument("--out", metavar="FILE", type=Path, default=default,
                        help=f"the versioned JSON result file (default: {default_out})")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if form else False,
                        help="print the JSON document instead of the table")


def _check(args: argparse.Namespace) -> None:
    for name in ("steps", "seeds", "seed"):
        value = getattr(args, name, None)
        low = {"steps": 1, "seeds": 2 if args.form == "validate" else 1, "seed": 0}[name]
        if value is not None and value < low:
            raise ConfigError(f"--{name} must be >= {low}, got {value}")
    if args.margin is not None and not 0 <= args.margin <= 1:
        raise ConfigError(f"--margin must be in [0, 1], got {args.margin}")
    if getattr(args, "budget_ops", None) is not None and args.budget_ops <= 0:
        raise ConfigError(f"--budget-ops must be > 0, got {args.budget_ops:g}")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the form asked for."""
    _check(args)
    if args.form is None and args.dataset is None:
        raise ConfigError("give --dataset NAME (or the form: aihpc recommend calibrate|validate)")
    # The parent's and a form's options share names; a form's defaults are None, filled here.
    args.out = args.out or Path(DEFAULT_OUT[args.form])
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
    from aihpc.recommend.ranking import MARGIN, rank
    from aihpc.recommend.report import format_recommendation
    from aihpc.recommend.tasks import from_dataset

    seed = 0 if args.seed is None else args.seed
    matcher = matching.load(args.matcher)
    task = from_dataset(args.dataset, args.data_path, seed=seed)
    candidates = resolve(args.candidates, task.input_shape, task.num_classes)
    rec = rank(task, candidates, matcher,
               margin=MARGIN if args.margin is None else args.margin, budget_ops=args.budget_ops, seed=seed)
    return emit(args, "recommend", rec.to_dict(), format_recommendation(rec))


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _calibrate(args: argparse.Namespace) -> int:
    import json

    from aihpc.fileio import atomic_write
    from aihpc.recommend.calibrate import calibrate
    from aihpc.recommend.tasks import STEPS

    command = "aihpc recommend calibrate " + " ".join(shlex.quote(a) for a in _form_argv())
    matcher, observations = calibrate(seed=0 if args.seed is None else args.seed,
                                      steps=args.steps or STEPS, seeds=args.seeds, command=command,
                                      progress=None if args.json else _progress)
    if args.matcher_out.parent and not args.matcher_out.parent.is_dir():
        raise ConfigError(f"cannot write {args.matcher_out}: directory {args.matcher_out.parent} "
                          f"does not exist")
    atomic_write(args.matcher_out, json.dumps(matcher.to_dict(), indent=2, sort_keys=True) + "\n")
    cv = matcher.provenance["cv_mae_by_alpha"]
    table = (f"matcher: {matcher.provenance['rows']} rows from {len(matcher.provenance['tasks'])} tasks, "
             f"ridge alpha {matcher.alpha:g} (leave-one-task-out MAE "
             f"{100 * cv[str(matcher.alpha)]:.1f} accuracy points)\nmatcher file: {args.matcher_out}")
    return emit(args, "recommend-calibration", {"matcher": matcher.to_dict(),
                                                "observations": [o.to_dict() for o in observations]}, table)


def _form_argv() -> list[str]:
    argv = sys.argv[1:]
    return argv[argv.index("calibrate") + 1:] if "calibrate" in argv else []


def _validate(args: argparse.Namespace) -> int:
    from aihpc.recommend import matcher as matching
    from aihpc.recommend.ranking import MARGIN
    from aihpc.recommend.tasks import STEPS, from_dataset
    from aihpc.recommend.validate import format_reports, rejudge, validate

    matcher = matching.load(args.matcher)
    margin = MARGIN if args.margin is None else args.margin
    seed = 100 if args.seed is None else args.seed
    if args.observations is not None:
        reports, observations = _rejudge(args, matcher, margin, seed, rejudge)
    else:
        fast = dict(tasks=[from_dataset("digits", seed=0)], limit=3, steps=5) if args.fast else {}
        steps = args.steps or fast.pop("steps", STEPS)
        reports, observations = validate(matcher, seeds=args.seeds, steps=steps, base_seed=seed,
                                         margin=margin, progress=None if args.json else _progress, **fast)
    data = {"reports": [r.to_dict() for r in reports], "observations": [o.to_dict() for o in observations]}
    return emit(args, "recommend-validation", data, format_reports(reports))


def _rejudge(args: argparse.Namespace, matcher, margin: float, seed: int, rejudge):
    from aihpc.recommend.study import observation_from_dict
    from aihpc.results.files import read_result

    doc = read_result(args.observations, "recommend-validation")
    observations = [observation_from_dict(o) for o in doc["data"].get("observations", [])]
    if not observations:
        raise ConfigError(f"{args.observations} holds no observations")
    steps = int(doc["data"]["reports"][0]["steps"]) if doc["data"].get("reports") else args.steps
    return rejudge(observations, matcher, margin=margin, seed=seed, steps=steps), observations
