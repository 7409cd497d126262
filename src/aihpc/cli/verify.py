"""``aihpc verify RUN_DIR``: recompute a run's operations and score; check its files agree.

RUN_DIR may also be the output folder of ``aihpc infer`` (its infer.json): the inference
result is checked against LoadGen's logs, its operations recounted and its quality
measured again on a sample (:mod:`aihpc.verify.infer`).

Prints one line per check (ok, failed, unchecked) and every mismatch, named
by trial and epoch; ``--json`` prints the same as JSON.  Exit status: 0 when
the run verifies (also when its store predates the digest chain: integrity
"unchecked"), 4 when anything does not agree (after the report, one line on
stderr says how many mismatches), 2 when RUN_DIR is not a finished run.
See :mod:`aihpc.verify.recount` for what each check does.  The verdict is
also recorded outside the run directory, under the checked files' SHA-256,
for ``aihpc rank`` (:mod:`aihpc.verify.verdicts`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="a run directory written by `aihpc run`, or an output folder of `aihpc infer`",
    )
    parser.add_argument("--json", action="store_true", help="print the verification as JSON")


def run(args: argparse.Namespace) -> int:
    from aihpc.base.errors import VerificationFailed
    from aihpc.verify.verdicts import verify_and_record

    result = verify_and_record(args.run_dir)
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=True, indent=2))
    else:
        print(result.render())
    if result.status == "no":
        raise VerificationFailed(
            f"{args.run_dir} does not verify: {len(result.mismatches)} mismatch(es), "
            f"the first: {result.mismatches[0].line()}"
        )
    return 0
