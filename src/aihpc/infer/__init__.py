"""``aihpc infer``: a model served under MLPerf Inference's LoadGen (layer 6).

:mod:`~aihpc.infer.source` (what is served), :mod:`~aihpc.infer.accuracy`
(its quality against float32), :mod:`~aihpc.infer.batches` (the fixed batch
sizes, padding, warm-up and CUDA graphs), :mod:`~aihpc.infer.steps` (a batch
of a classifier or a language model), :mod:`~aihpc.infer.systems` (the system
under test: a queue and dynamic batches), :mod:`~aihpc.infer.latency` (a
latency split into queueing and compute), :mod:`~aihpc.infer.loadgen` (one
LoadGen test, its logs read back), :mod:`~aihpc.infer.scenarios` (offline,
single-stream, the server's rate search, the duration predicted),
:mod:`~aihpc.infer.record` (``infer.json``), :mod:`~aihpc.infer.summary` (what
is printed), :mod:`~aihpc.infer.command` (the steps in order).
"""
