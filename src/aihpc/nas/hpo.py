"""Hyperparameters for each trial from Optuna's TPE sampler, through ask/tell.

The master asks for a set of hyperparameters whenever it proposes a trial and
tells the study the trial's best validation accuracy when it ends (or that it
failed).  The study lives in the master's memory; on resume it is rebuilt
from the store's finished trials, so nothing needs pickling.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any


class HyperparameterSearch:
    """Learning rate, batch size, weight decay, momentum and dropout.

    Ranges: lr log-uniform in [1e-3, 0.4] (SGD) or [1e-4, 1e-2] (AdamW);
    weight decay log-uniform in [1e-6, 1e-2]; momentum in [0.5, 0.99];
    dropout in [0, 0.5]; batch size one of ``batch_sizes``.
    """

    def __init__(self, seed: int, batch_sizes: Sequence[int], optimizer: str, schedule: str) -> None:
        import optuna

        optuna.logging.set_verbosity(logging.WARNING)
        self._optuna = optuna
        lr_low, lr_high = (1e-3, 0.4) if optimizer == "sgd" else (1e-4, 1e-2)
        D = optuna.distributions
        self.distributions: dict[str, Any] = {
            "lr": D.FloatDistribution(lr_low, lr_high, log=True),
            "batch_size": D.CategoricalDistribution(list(batch_sizes)),
            "weight_decay": D.FloatDistribution(1e-6, 1e-2, log=True),
            "momentum": D.FloatDistribution(0.5, 0.99),
            "dropout": D.FloatDistribution(0.0, 0.5),
        }
        self.fixed = {"optimizer": optimizer, "schedule": schedule}
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, constant_liar=True)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)

    def ask(self) -> tuple[int, dict[str, Any]]:
        """A new trial number and its hyperparameters (plus the fixed ones)."""
        trial = self.study.ask(self.distributions)
        return trial.number, {**trial.params, **self.fixed}

    def tell(self, number: int, accuracy: float | None) -> None:
        """Report a trial's best validation accuracy; ``None`` for a failed trial."""
        state = self._optuna.trial.TrialState
        if accuracy is None:
            self.study.tell(number, state=state.FAIL)
        else:
            self.study.tell(number, accuracy)

    def restore(self, params: dict[str, Any], accuracy: float | None) -> int:
        """Re-add a trial finished in an earlier segment of the run; returns its new number."""
        state = self._optuna.trial.TrialState
        values = {k: params[k] for k in self.distributions}
        frozen = self._optuna.trial.create_trial(
            params=values,
            distributions=self.distributions,
            value=accuracy,
            state=state.COMPLETE if accuracy is not None else state.FAIL,
        )
        self.study.add_trial(frozen)
        return len(self.study.trials) - 1

    def resume(self, params: dict[str, Any]) -> int:
        """Open a trial again (one that was running when a master died) with its old parameters."""
        self.study.enqueue_trial({k: params[k] for k in self.distributions})
        number, _ = self.ask()
        return number
