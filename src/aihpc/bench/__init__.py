"""Deep500's four levels of benchmarks, each validated as well as timed.

* Level 0, :mod:`aihpc.bench.operators`: single operators, forward and
  backward, per dtype, against float64 references and finite differences;
* Level 1, :mod:`aihpc.bench.model`: a whole network, per layer and per
  operator type, inference and training;
* Level 2, :mod:`aihpc.bench.training`: time to a target accuracy, with the
  convergence curve;
* Level 3, :mod:`aihpc.bench.distributed`: data-parallel training against one
  process, with all-reduce time and volume measured apart.

Timing goes through :mod:`aihpc.bench.timing` (``torch.utils.benchmark``);
achieved FLOP/s take their operations from :func:`aihpc.count_ops` and are
placed on the measured roofline of :mod:`aihpc.roofline`.
"""
