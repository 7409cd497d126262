"""``aihpc run`` end to end (:mod:`~aihpc.runner.run`: inputs checked, workers started, the
master run, results written) and at several worker counts (:mod:`~aihpc.runner.scaling`).

* :mod:`aihpc.runner.search` -- the asynchronous search the master runs.
* :mod:`aihpc.runner.display` -- what a person sees during and after.
* :mod:`~aihpc.runner.measure` -- the peak before and after, the staging and the energy beside
  the score.

The workers it runs on are made by :mod:`aihpc.launch`; the records it writes live below it, in
:mod:`aihpc.records` and :mod:`aihpc.results`; what a worker does with an epoch, in
:mod:`aihpc.train`.
"""
