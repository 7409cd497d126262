"""Energy measured beside the score: NVML per GPU, RAPL per CPU package and DRAM, where readable.

:mod:`aihpc.energy.meter` samples cumulative counters and sums their deltas
(wraparound and restarts handled); :mod:`aihpc.energy.rapl` and
:mod:`aihpc.energy.nvml` read the counters; :mod:`aihpc.energy.worker` runs
on each worker of ``aihpc run`` and :mod:`aihpc.energy.run` gathers the
workers' readings into results.json's ``energy`` block.  Where nothing can
be read, the reason is recorded, never an estimate.
"""
