"""What every layer uses and that imports nothing else of aihpc's: the errors and their exit
codes (:mod:`~aihpc.base.errors`), the checks of numeric settings (:mod:`~aihpc.base.checks`),
atomic file writes (:mod:`~aihpc.base.fileio`), number formatting (:mod:`~aihpc.base.fmt`) and the
run's settings as one checked value (:mod:`~aihpc.base.config`)."""
