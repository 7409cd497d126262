"""The search's machinery, shared by every task.

* :mod:`aihpc.nas.plans` -- what every task's growth operators share (the first
  plan within a size, state copies); :mod:`aihpc.nas.moments` -- what a growth
  step does to the optimizer's state: each step's gradient map, beside its
  weight map;
* :mod:`aihpc.nas.search` -- the strategies that choose a parent;
  :mod:`aihpc.nas.hpo` -- hyperparameters from TPE (:mod:`aihpc.nas.tpe_study`)
  in child processes (:mod:`aihpc.nas.hpo_process`), restarted when they die
  (:mod:`aihpc.nas.helper_restart`).

A task's own architectures and operators are in its package
(:mod:`aihpc.tasks.image`, :mod:`aihpc.tasks.language`).
"""
