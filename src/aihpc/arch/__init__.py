"""A saved architecture (a run's ``arch.json`` or a zoo model) taken on its own: its operations
counted (``aihpc count``, :mod:`~aihpc.arch.count`) and its network exported to ONNX
(``aihpc export``, :mod:`~aihpc.arch.export`)."""
