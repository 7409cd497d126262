"""The run's quality as the report shows it: its task's ReportQuality.

Every part of the report that reads, ranks, formats or plots a model's quality
goes through the one :class:`~aihpc.scoring.quality.ReportQuality` of the
run's task (:attr:`aihpc.tasks.base.Task.report_quality`): which keys to read
in the trials, epochs and timeline, the words that name it, which way is
better, how its values are written, its cards and the lines of its plots.
"""

from __future__ import annotations

from typing import Any

from aihpc.scoring.quality import ReportQuality
from aihpc.tasks import recorded_task


def quality_for(results: dict[str, Any]) -> ReportQuality:
    """The quality of a run's results: its task's, the task its configuration names (the image
    task for a file from before there were tasks)."""
    config = results.get("config")
    return recorded_task(config if isinstance(config, dict) else None).report_quality
