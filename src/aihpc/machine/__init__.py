"""What the machine is: its devices and which one a process trains on
(:mod:`~aihpc.machine.devices`), its network interfaces and SLURM controller
(:mod:`~aihpc.machine.cluster`), its processor and the libraries torch calls
(:mod:`~aihpc.machine.processor`, :mod:`~aihpc.machine.cpu_libraries`), and the environment a
result file records (:mod:`~aihpc.machine.environment`)."""
