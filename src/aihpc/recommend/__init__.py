"""Training-free model recommendation (Wang et al. 2017, "An Automated CNN
Recommendation System for Image Classification Tasks", updated with today's
measures).

* :mod:`~aihpc.recommend.complexity` -- how hard the task is (F1, N1, N3,
  T2, a random-convolution linear probe), on a bounded sample;
* :mod:`~aihpc.recommend.proxies` -- how capable each untrained candidate is
  (snip, grad_norm, synflow, jacob_cov, NASWOT) on one minibatch;
* :mod:`~aihpc.recommend.matcher` -- a regularised logistic model from both
  to the accuracy a short training reaches, bounded to [chance, 1], with an
  80 % interval; fitted by :mod:`~aihpc.recommend.calibrate` on the task
  families of :mod:`~aihpc.recommend.families` and shipped as
  ``data/matcher.json`` beside the observations it was fitted on;
* :mod:`~aihpc.recommend.domain` -- whether a task lies inside what was
  calibrated;
* :mod:`~aihpc.recommend.ranking` -- rank and pick (inside the domain: the
  cheapest candidate whose interval is within a margin of the best
  prediction; outside: synflow alone); :mod:`~aihpc.recommend.validate`
  judges it on held-out tasks of each family, refitted without that family.

``aihpc recommend`` is the command line (:mod:`aihpc.cli.recommend`).
"""
