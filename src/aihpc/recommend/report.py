"""The readable table of ``aihpc recommend``."""

from __future__ import annotations

from aihpc.base.fmt import format_si
from aihpc.recommend.proxies import PROXIES
from aihpc.recommend.ranking import Ranked, Recommendation


def _prediction(r: Ranked) -> str:
    if r.predicted is None:
        return f"{'-':>6} {'':>13}"
    return f"{r.predicted:>6.3f} [{r.low:.3f}, {r.high:.3f}]"


def format_recommendation(rec: Recommendation) -> str:
    """Task complexity and domain, one row per candidate (best first), then the pick and its
    rule."""
    c = rec.complexity
    lines = [
        f"task {rec.task}: {c.num_classes} classes, {c.num_samples} training samples, "
        f"dimension {c.dimension} (measures on a sample of {c.sample_size})",
        f"  complexity: F1 {c.f1:.3g} (max Fisher ratio, higher = easier)  N1 {c.n1:.3f} (boundary "
        f"fraction)  N3 {c.n3:.3f} (1-NN error)  T2 {c.t2:.3g} (samples/dim)  "
        f"probe error {c.probe_error:.3f} (random-conv linear probe)",
        f"  domain: {rec.domain}",
        "",
    ]
    head = (
        f"{'rank':>4}  {'candidate':<14} {'pred acc [80% interval]':>27} {'params':>9} "
        f"{'train ops/sample':>16}  " + "  ".join(f"{p:>10}" for p in PROXIES)
    )
    lines += [head, "-" * len(head)]
    for r in rec.ranked:
        s = r.score
        mark = "*" if s.name == rec.choice else (" " if r.within_budget else "-")
        lines.append(
            f"{r.rank:>4}{mark} {s.name:<14} {_prediction(r):>27} {s.params:>9,} "
            f"{format_si(s.ops_per_sample, count=True):>16}  "
            + "  ".join(f"{s.proxies[p]:>10.4g}" for p in PROXIES)
        )
    budget = (
        ""
        if rec.budget_ops is None
        else f", within {format_si(rec.budget_ops, count=True)} ops/sample ('-': over)"
    )
    if rec.method == "matcher":
        rule = (
            f"the cheapest candidate within {rec.margin:g} accuracy of the best prediction at any "
            f"task level{budget}"
        )
        legend = (
            "pred acc: the matcher's accuracy after 100 training steps, in [1/classes, 1]; "
            "the interval held 80 % of calibration accuracies with their family left out "
            "(56-67 % of held-out validation accuracies: docs/guide/recommend.md)"
        )
    else:
        rule = (
            f"the largest {rec.method}{budget}; the matcher is not used outside its domain, "
            f"{rec.method} alone ranks"
        )
        legend = (
            "pred acc: none outside the domain; "
            f"candidates are ranked by {rec.method} (larger = better)"
        )
    lines += [
        "",
        legend,
        f"recommendation (*): {rec.choice} -- {rule}; nothing was trained ({rec.seconds:.1f} s)",
    ]
    return "\n".join(lines)
