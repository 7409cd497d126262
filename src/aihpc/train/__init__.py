"""One epoch of one trial, on the worker that was sent it.

* :mod:`~aihpc.train.worker` -- the task every worker runs: the epoch, alone
  (:mod:`~aihpc.train.trainer`) or data-parallel over a pool of ranks
  (:mod:`~aihpc.train.ranks`, :mod:`~aihpc.train.group`).
* :mod:`~aihpc.train.staging` and :mod:`~aihpc.train.feed` -- the data, staged
  once per worker and read in batches; :mod:`~aihpc.train.sample_ops` -- the
  operations per sample, counted once per architecture
  (:mod:`~aihpc.tasks.image.count`: the same count layer by layer, fast
  enough for ``aihpc verify`` to recount hundreds of thousands of trials).
* :mod:`~aihpc.train.optim`, :mod:`~aihpc.train.evaluation`,
  :mod:`~aihpc.train.timing` -- the optimizer and schedule, evaluation
  passes, phase times; :mod:`~aihpc.train.weights` -- the weight files each
  epoch writes where it trained; :mod:`~aihpc.recommend.screen` -- proxy
  screening of candidate children.
"""
