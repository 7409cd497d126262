"""``aihpc verify``: check a finished run against itself, from its own records.

:mod:`~aihpc.verify.recount` recounts every architecture and the score,
:mod:`~aihpc.verify.chain` checks the store against its digest chain,
:mod:`~aihpc.verify.mlperf_log` checks the MLPerf log against results.json,
:mod:`~aihpc.verify.infer` and :mod:`~aihpc.verify.infer_model` check an
inference result (``aihpc infer``'s infer.json), and :mod:`~aihpc.verify.checks`
holds what each check reports.
"""
