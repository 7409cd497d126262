"""The master's proposals: what a new trial is.

A new trial is the seed network (the first trial, and every trial with
strategy "none"), or a child: a parent the strategy chooses among the
finished trials that can still be parents (:class:`~aihpc.runner.search.parents.ParentPool`),
morphed by random function-preserving growth steps of the run's task
(:meth:`aihpc.tasks.base.Task.plan`) until its architecture is one never
tried.  Its hyperparameters come from TPE.  Only architectures are morphed
here; a :class:`~aihpc.records.messages.Morph` recipe lets the worker make the
same steps on the parent's weights.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import MorphError
from aihpc.records.messages import Morph
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.parents import SEED_TRIAL, ParentPool
from aihpc.runner.search.trials import LiveTrial, trial_seed
from aihpc.tasks import Arch, Task

if TYPE_CHECKING:
    from aihpc.nas.hpo import HyperparameterSearch
    from aihpc.nas.search import Strategy

MORPH_TRIES = 10  # parents tried, and morphs per parent, before a proposal gives up

#: A child ready to become a trial: (parent, spec, recipe, the morphs applied).
Child = tuple[int, Arch, Morph, str]


class Proposer:
    """Makes new trials and candidate children for the master."""

    def __init__(
        self,
        config: RunConfig,
        task: Task,
        strategy: Strategy | None,
        hpo: HyperparameterSearch,
        parents: ParentPool,
        data: dict[str, Any],
    ) -> None:
        self.config = config
        self.task = task
        self.strategy = strategy  # None: no architecture search
        self.hpo = hpo
        self.parents = parents
        self.data = data  # the data set, as the task described it (its seed network's input)
        self.max_params: int | None = data["max_params"]
        self.rng = random.Random(config.seed)
        self.seen_hashes: set[str] = set()

    def trial(
        self, trial_id: int, budget: int, depth: int, child: Child | None = None
    ) -> LiveTrial:
        """Trial ``trial_id``: the seed, ``child``, or a child morphed now.

        ``depth``: how many suggestions TPE should keep drawn ahead (the
        master's slots).
        """
        number, drawn = self.hpo.ask(depth=depth)
        if child is None and (trial_id == SEED_TRIAL or self.strategy is None):
            spec = self.task.seed_arch(self.data)
            parent, morph, recipe = None, "seed", None
        else:
            if child is None:
                child = self.child()
            parent, spec, recipe, morph = child
        arch, arch_hash = spec.to_dict(), spec.content_hash()
        self.seen_hashes.add(arch_hash)
        if trial_id == SEED_TRIAL:
            self.parents.add_seed(arch, spec)
        return LiveTrial(
            id=trial_id,
            parent=parent,
            arch=arch,
            arch_hash=arch_hash,
            morph=morph,
            hparams=Hyperparameters.from_dict(drawn),
            hpo_number=number,
            budget=budget,
            num_params=spec.num_params(),
            seed=trial_seed(self.config.seed, trial_id),
            recipe=recipe,
            spec=spec,
        )

    def child(self) -> Child:
        """One new child of a parent the strategy chooses."""
        parent, children = self.children(1)
        return (parent, *children[0])

    def children(self, k: int) -> tuple[int, list[tuple[Arch, Morph, str]]]:
        """``k`` new architectures morphed from one parent the strategy chooses.

        Returns (parent, [(spec, recipe, how)]).  Before any trial has
        finished, the parent is the seed with its initial weights.  A child
        whose architecture was already tried (or is a sibling's) is morphed
        again; a parent that cannot give ``k`` new children within
        ``max_params`` is passed over for another (the seed, the smallest, last).
        """
        assert self.strategy is not None, "only a run with a search strategy morphs"
        last_error = None
        for attempt in range(MORPH_TRIES):
            chosen = (
                self.strategy.choose(list(self.parents.window), self.rng)
                if attempt < MORPH_TRIES - 1
                else None
            )
            parent = chosen.trial_id if chosen is not None else SEED_TRIAL
            taken: set[str] = set()
            try:
                return parent, [self._morph(parent, taken) for _ in range(k)]
            except MorphError as exc:
                last_error = exc
        raise MorphError(f"no new architecture within max_params={self.max_params}: {last_error}")

    def _morph(self, parent: int, taken: set[str]) -> tuple[Arch, Morph, str]:
        """One child of ``parent`` whose architecture is neither tried nor in ``taken``.

        The child's architecture is added to ``taken``.
        """
        seed = self.rng.getrandbits(63)
        rng = random.Random(seed)
        spec = self.parents.spec(parent)
        morphs: list[str] = []
        for steps in range(1, MORPH_TRIES + 1):  # morph again until the architecture is new
            spec, _, description = self.task.plan(spec, rng, self.max_params)
            morphs.append(description)
            arch_hash = spec.content_hash()
            if arch_hash not in self.seen_hashes and arch_hash not in taken:
                taken.add(arch_hash)
                recipe = Morph(
                    self.parents.arch(parent),
                    self.parents.weights(parent),
                    trial_seed(self.config.seed, parent),
                    seed,
                    steps,
                    self.max_params,
                )
                return spec, recipe, "; ".join(morphs)
        raise MorphError(f"{MORPH_TRIES} morphs of trial {parent} gave no new architecture")
