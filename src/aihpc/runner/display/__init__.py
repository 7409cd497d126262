"""What a person sees of a run: the live console (:mod:`~aihpc.runner.display.console`), the
observer of the master's events (:mod:`~aihpc.runner.display.observer`) and the summary printed
at the end (:mod:`~aihpc.runner.display.summary`)."""
