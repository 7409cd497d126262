"""The run's records and their files, below everything that writes or reads them.

The store (SQLite, the master its only writer), its digest chain, the score
computed from it, results.json's schema, the environment a result was made
in, the MLPerf log, and the result files of the explaining commands.
"""
