"""Roofline inputs: the machine's measured roofs, and kernels placed under them.

- :mod:`aihpc.roofline.peak`: achieved matrix-multiply FLOP/s per dtype (the compute roofs);
- :mod:`aihpc.roofline.bandwidth`: STREAM copy and triad bytes/s (the memory roof; device
  memory on a GPU);
- :mod:`aihpc.roofline.model`: :class:`~aihpc.roofline.model.Roofline` (attainable FLOP/s,
  ridge, share) and :class:`~aihpc.roofline.model.RooflinePoint`, from measured numbers only
  ("unknown" otherwise);
- :mod:`aihpc.roofline.machine`: all roofs of one device measured together, the
  ``aihpc roofline`` table;
- :mod:`aihpc.roofline.plot`: the log-log roofline plot (PNG).
"""
