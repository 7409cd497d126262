"""The readable table of ``aihpc recommend``."""

from __future__ import annotations

from aihpc.counting import human
from aihpc.recommend.proxies import PROXIES
from aihpc.recommend.ranking import Recommendation


def format_recommendation(rec: Recommendation) -> str:
    """Task complexity, then one row per candidate (best predicted first), then the pick."""
    c = rec.complexity
    lines = [f"task {rec.task}: {c.num_classes} classes, {c.num_samples} training samples, "
             f"dimension {c.dimension} (measures on a sample of {c.sample_size})",
             f"  complexity: F1 {c.f1:.3g} (max Fisher ratio, higher = easier)  N1 {c.n1:.3f} (boundary "
             f"fraction)  N3 {c.n3:.3f} (1-NN error)  T2 {c.t2:.3g} (samples/dim)  "
             f"probe error {c.probe_error:.3f} (random-conv linear probe)", ""]
    head = (f"{'rank':>4}  {'candidate':<14} {'pred acc':>8} {'(raw)':>6} {'params':>9} {'train ops/sample':>16}  "
            + "  ".join(f"{p:>10}" for p in PROXIES))
    lines += [head, "-" * len(head)]
    for r in rec.ranked:
        s = r.score
        mark = "*" if s.name == rec.choice else (" " if r.within_budget else "-")
        lines.append(f"{r.rank:>4}{mark} {s.name:<14} {r.predicted:>8.3f} {r.raw:>6.3f} {s.params:>9,} "
                     f"{human(s.ops_per_sample):>16}  "
                     + "  ".join(f"{s.proxies[p]:>10.4g}" for p in PROXIES))
    budget = "" if rec.budget_ops is None else f", within {human(rec.budget_ops)} ops/sample ('-': over)"
    lines += ["", "pred acc: the matcher's accuracy after 100 training steps, clipped to [0, 1]; "
                  "(raw): its unclipped value, which ranks",
              f"recommendation (*): {rec.choice} -- the cheapest candidate predicted within "
                  f"{rec.margin:g} accuracy of the best{budget}; nothing was trained "
                  f"({rec.seconds:.1f} s)"]
    return "\n".join(lines)
