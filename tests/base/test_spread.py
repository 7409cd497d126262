"""The one spread statistic (aihpc.base.spread) and old results.json files read with it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from aihpc.base.spread import SPREAD_WARNING, STATISTIC, spread, spread_warning
from aihpc.scoring.peak import PeakResult, RunPeak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run" / "results.json"
LM_FIXTURE = Path(__file__).resolve().parents[1] / "report" / "fixtures" / "results_lm.json"


def test_the_spread_is_the_interquartile_range_over_the_median() -> None:
    assert spread([5.0]) == 0.0
    assert spread([1.0, 3.0]) == pytest.approx(1.0 / 2.0)  # half the range of two
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.0 - 2.0) / 3.0)
    # one stray repeat moves neither the median nor the spread much
    assert spread([10.0] * 9 + [100.0]) == 0.0
    assert spread([0.0, 0.0, 1.0]) == math.inf
    with pytest.raises(ValueError):
        spread([])


def test_the_warning_has_one_form() -> None:
    assert spread_warning("peak", "5 repeats' FLOP/s", SPREAD_WARNING) is None
    assert spread_warning("peak", "5 repeats' FLOP/s", math.nan) is None
    assert spread_warning("conv", "12 timed blocks", 0.25) == (
        "conv: the 12 timed blocks spread over 25% of the median (IQR / median > 10%): "
        "the machine was busy or its clocks changed; treat it as unreliable"
    )


def test_an_old_peak_written_with_the_range_reads_with_the_iqr() -> None:
    old = json.loads(FIXTURE.read_text())["peak"]["per_worker"][0]
    assert "spread_statistic" not in old
    median = old["flops_per_s"]
    assert old["spread"] == pytest.approx((max(old["repeats"]) - min(old["repeats"])) / median)
    part = PeakResult.from_dict(old)
    assert part.spread == pytest.approx(spread(old["repeats"])) and part.spread < old["spread"]
    assert part.warning == old["warning"]  # as recorded
    assert part.to_dict()["spread_statistic"] == STATISTIC
    assert PeakResult.from_dict(part.to_dict()) == part


def test_an_old_run_peak_reads_its_spreads_as_the_iqr() -> None:
    """A results.json ``peak`` of the form before: parts without ``spread_statistic``, every
    ``spread`` the range; it reads, and every spread is recomputed."""
    data = json.loads(LM_FIXTURE.read_text())["peak"]
    for worker in data["per_worker"]:
        for part in worker["parts"]:
            part.pop("spread_statistic", None)
    run = RunPeak.from_dict(data)
    parts = [p for w in run.per_worker for p in w.parts]
    assert all(p.spread == pytest.approx(spread(p.repeats)) for p in parts)
    assert run.spread == max(p.spread for p in parts)
    assert RunPeak.from_dict(json.loads(json.dumps(run.to_dict()))) == run
