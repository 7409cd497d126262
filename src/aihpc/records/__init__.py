"""The run's records and their files, below everything that writes or reads them.

The store (SQLite, the master its only writer; its tables in store_schema),
its digest chain, the score computed from it, results.json's schema (a
child's architecture as the diff of its parent's: archdiff), the environment
a result was made in, the MLPerf log, and the result files of the explaining
commands.
"""
