"""The language task, in one package: language modelling, decoder-only transformers grown by
exact operators.

Its architecture value (:mod:`.spec`), network (:mod:`.net`), growth operators
(:mod:`.deepen`, :mod:`.widen`, their contract in :mod:`.growth`, one drawn at random by
:mod:`.morphism`), counting (:mod:`.count`, :mod:`.decode` for generation),
compiled regions (:mod:`.regions`), data (:mod:`.data`, :mod:`.hmm`,
:mod:`.windows`), quality and report vocabulary (:mod:`.quality`), its settings
(:mod:`.options`, ``[lm]`` of a TOML file) and the
:class:`~aihpc.tasks.base.Task` joining them (:mod:`.task`), registered in
:mod:`aihpc.tasks`.  Importing the package imports none of them.
"""
