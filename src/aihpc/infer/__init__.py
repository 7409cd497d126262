"""``aihpc infer``: a model served under MLPerf Inference's LoadGen (layer 6).

:mod:`~aihpc.infer.source` (what is served), :mod:`~aihpc.infer.accuracy`
(its quality against float32), :mod:`~aihpc.infer.systems` (the system under
test: a queue and dynamic batches), :mod:`~aihpc.infer.loadgen` (one LoadGen
test, its logs read back), :mod:`~aihpc.infer.scenarios` (offline,
single-stream, the server's rate search), :mod:`~aihpc.infer.record`
(``infer.json``), :mod:`~aihpc.infer.command` (the steps in order).
"""
