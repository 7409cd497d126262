"""Where the work runs: Dask workers on this machine, at a running scheduler, as batch jobs
(:mod:`~aihpc.launch.jobqueue`) or as the tasks of a SLURM allocation (:mod:`~aihpc.launch.slurm`),
all made by :mod:`~aihpc.launch.executor` with :mod:`~aihpc.launch.dask_settings`;
:mod:`~aihpc.launch.placement` gives each worker its devices and :mod:`~aihpc.launch.remote`
brings a worker's failure back as one line."""
