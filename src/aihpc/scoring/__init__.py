"""What a score is made of: the run's quality (:mod:`~aihpc.scoring.quality`), the peak it is set
against (:mod:`~aihpc.scoring.peak`) and the score, its error and its regulated form
(:mod:`~aihpc.scoring.score`).  Pure values: the tasks, the roofline and the records use them."""
