"""``results.json``, the run's result file: written from the store at the end of a run
(:mod:`~aihpc.results.write`) and read back, every version since the first, as a
:class:`~aihpc.results.read.RunResults` (:mod:`~aihpc.results.read`)."""
