"""Results set side by side: ``aihpc compare`` (:mod:`~aihpc.ranking.compare`, which results may
be compared and how) and ``aihpc rank`` (:mod:`~aihpc.ranking.rank`, a list of verified results
under compare's like-for-like rule)."""
