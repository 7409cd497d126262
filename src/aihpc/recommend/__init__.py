"""Training-free model recommendation (Wang et al. 2017, "An Automated CNN
Recommendation System for Image Classification Tasks", updated with today's
measures).

* :mod:`~aihpc.recommend.complexity` -- how hard the task is (F1, N1, N3,
  T2, a random-convolution linear probe), on a bounded sample;
* :mod:`~aihpc.recommend.proxies` -- how capable each untrained candidate is
  (snip, grad_norm, synflow, jacob_cov, NASWOT) on one minibatch;
* :mod:`~aihpc.recommend.matcher` -- a ridge regression, fitted by
  :mod:`~aihpc.recommend.calibrate` and shipped as ``data/matcher.json``,
  from both to the accuracy a short training reaches;
* :mod:`~aihpc.recommend.ranking` -- rank and pick the cheapest candidate
  within a margin of the best; :mod:`~aihpc.recommend.validate` judges it
  on held-out tasks.

``aihpc recommend`` is the command line (:mod:`aihpc.cli.recommend`).
"""
