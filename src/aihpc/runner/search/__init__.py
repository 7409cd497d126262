"""The asynchronous search of ``aihpc run``: the master (:mod:`~aihpc.runner.search.master`) fills
every free worker with an epoch or a new trial and commits each result as it comes
(:mod:`~aihpc.runner.search.trials`, :mod:`~aihpc.runner.search.screening`); new trials come from
:mod:`~aihpc.runner.search.proposals`, and :mod:`~aihpc.runner.search.parents` keeps the weights
the search can still use."""
