"""Results of aihpc runs: environment metadata and MLPerf-style logs.

Modules: :mod:`aihpc.results.environment` (what machine and software produced a
result) and :mod:`aihpc.results.mlperf` (MLPerf compliance logging and checking).
"""
