"""Roofline inputs: the machine's measured compute peak.

:mod:`aihpc.roofline.peak` measures the achieved matrix-multiply FLOP/s per
dtype (:func:`aihpc.roofline.peak.measure_peak`), the ceiling against which a
run's operation rate is judged.
"""
