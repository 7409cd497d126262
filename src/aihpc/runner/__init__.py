"""``aihpc run``'s machinery: the master that runs the search, and the workers it runs on.

* :mod:`~aihpc.runner.run` -- the run end to end: inputs checked, workers
  started, the master run, results written; :mod:`~aihpc.runner.scaling`
  repeats it at several worker counts.
* :mod:`~aihpc.runner.master` -- the asynchronous search: fills every free
  worker with an epoch or a new trial, commits each result as it comes
  (:mod:`~aihpc.runner.trials`, :mod:`~aihpc.runner.screening`); new trials
  come from :mod:`~aihpc.runner.proposals`, and :mod:`~aihpc.runner.parents`
  keeps the weights the search can still use, deleting the rest.
* :mod:`~aihpc.runner.executor` -- Dask workers on this machine, at a
  running scheduler, or as batch jobs (:mod:`~aihpc.runner.jobqueue`) or
  the tasks of an allocation (:mod:`~aihpc.runner.slurm`), all with
  :mod:`~aihpc.runner.dask_settings`; :mod:`~aihpc.runner.placement` gives
  each its devices; :mod:`~aihpc.runner.remote` brings a worker's failure
  back as one line.
* :mod:`~aihpc.runner.measure` -- the peak before and after, the staging and
  the energy beside the score; :mod:`~aihpc.runner.console`,
  :mod:`~aihpc.runner.observer` and :mod:`~aihpc.runner.summary` -- what a
  person sees during and after.

The records it writes live below it, in :mod:`aihpc.records`; what a worker
does with an epoch, in :mod:`aihpc.train`.
"""
