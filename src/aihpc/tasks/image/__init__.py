"""The image task, in one package: classification, CNNs grown by function-preserving network
morphism (AIPerf's).

Its architecture value (:mod:`.spec`, :mod:`.layer`, :mod:`.graph`), network
(:mod:`.build`), seeds (:mod:`.seeds`), growth operators (:mod:`.morphism`,
:mod:`.widening`), counting (:mod:`.count`), compiled regions (:mod:`.regions`),
data sets (:mod:`.data`), quality and report vocabulary (:mod:`.quality`), its
settings (:mod:`.options`, ``[image]`` of a TOML file) and the
:class:`~aihpc.tasks.base.Task` joining them (:mod:`.task`), registered in
:mod:`aihpc.tasks`.  Importing the package imports none of them.
"""
