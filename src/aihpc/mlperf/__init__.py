"""The MLPerf log a run writes (:mod:`~aihpc.mlperf.log`, its lines made by
:mod:`~aihpc.mlperf.line`) and the MLPerf compliance checker run on it with our rules
(:mod:`~aihpc.mlperf.check`, package data in ``rules/``)."""
