"""The master's proposals: what a new trial is.

A new trial is the seed network (the first trial, and every trial with
strategy "none" or "seed"), or a child: a parent the strategy chooses among
the finished trials that can still be parents
(:class:`~aihpc.runner.search.parents.ParentPool`), grown by the run's
task's function-preserving growth steps (:meth:`aihpc.tasks.base.Task.plan`):
towards the size compute-optimal for the time left, or kept at its
parent's size where that is already past it
(:mod:`aihpc.runner.search.growth`); or a fork of the running trial that
leads the run, at its size or, where that leader is kept past its plateau
(``RunConfig.keep_leader``, :mod:`aihpc.runner.search.lifecycle`), grown
from its latest weights (:meth:`Proposer.fork`,
:mod:`aihpc.runner.search.fork`).  Only architectures are morphed here; a
:class:`~aihpc.records.messages.Morph` recipe lets the worker make the same
steps on the parent's weights.

Its hyperparameters come from TPE, from its parent perturbed
(:mod:`aihpc.runner.search.inherit`), or, with strategy "seed", from the
task's defaults; its place in a lineage (:mod:`aihpc.runner.search.lineage`)
from its parent, where it starts from the parent's trained weights.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import MorphError
from aihpc.records.messages import Morph, WeightsRef
from aihpc.records.rows import SEED_TRIAL
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search import inherit
from aihpc.runner.search.growth import Sizes, grow, keeps_size
from aihpc.runner.search.lifecycle import Mechanisms
from aihpc.runner.search.lineage import Lineage
from aihpc.runner.search.parents import ParentPool, Trained
from aihpc.runner.search.trials import LiveTrial, trial_seed
from aihpc.tasks import Arch, Task

if TYPE_CHECKING:
    from aihpc.nas.hpo import HyperparameterSearch
    from aihpc.nas.search import Strategy

MORPH_TRIES = 10  # parents tried before a proposal gives up
#: The morph of a child that keeps its parent's architecture (aihpc.runner.search.growth).
EXPLOIT = "exploit (the parent's architecture: compute-optimal for the time left)"
#: The morph of a child of a running leader (aihpc.runner.search.fork), before its id and epoch.
FORK = "fork (the architecture and latest weights) of running trial"
#: The morph of a child grown from a kept leader's latest weights, before its id and epoch.
GROWN_FROM_RUNNING = "grown from the latest weights of running trial"

#: A child ready to become a trial: (parent, spec, recipe, the morphs applied).
Child = tuple[int, Arch, Morph, str]


@dataclass(frozen=True)
class Moment:
    """The run when a trial is proposed: ``t`` seconds of its clock from its start (the seconds
    its masters ran), ``left`` seconds to the deadline, and the operations one worker can still
    do (:func:`aihpc.runner.search.growth.worker_room`; None: not known yet)."""

    t: float
    left: float
    room: float | None


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
        self.mechanisms = Mechanisms.of(config)
        self.hpo = hpo
        self.space = task.search_space(config)
        self.parents = parents
        self.data = data  # the data set, as the task described it (its seed network's input)
        self.sizes = Sizes(task, data)
        self.max_params: int | None = data["max_params"]
        self.rng = random.Random(config.run.seed)
        self.seen_hashes: set[str] = set()

    def trial(
        self,
        trial_id: int,
        budget: int,
        depth: int,
        moment: Moment,
        child: Child | None = None,
        running_parent: Trained | None = None,
    ) -> LiveTrial:
        """Trial ``trial_id``: the seed, ``child``, or a child morphed now.

        ``depth``: how many suggestions TPE should keep drawn ahead (the
        master's slots); ``running_parent``: what ``child`` takes from its
        parent where that is a running trial (:meth:`fork`), not one of
        the pool's.
        """
        if child is None and (trial_id == SEED_TRIAL or self.strategy is None):
            return self._seed(trial_id, budget, depth, moment)
        if child is None:
            try:
                child = self.child(moment.room)
            except MorphError as exc:  # every architecture within max_params is taken
                return dataclasses.replace(
                    self._seed(trial_id, budget, depth, moment), morph=f"seed ({exc})"
                )
        parent, spec, recipe, morph = child
        trained = running_parent if running_parent is not None else self.parents.trained(parent)
        # a child of the seed before it trained starts a lineage of its own
        lineage = trained.lineage if trained is not None else Lineage(moment.t, 0)
        if (
            trained is not None
            and self.mechanisms.inherit_hparams
            and inherit.worth_inheriting(parent, list(self.parents.window))
        ):
            hparams = inherit.perturb(trained.hparams, self.rng, self.space)
            number, origin = self.hpo.adopt(hparams.searched()), inherit.origin(parent)
        elif trained is None and self.mechanisms.inherit_hparams:
            # a lineage's root beside the seed's: the defaults explored, as PBT starts a population
            hparams = inherit.perturb(self.task.default_hparams(self.config), self.rng, self.space)
            number, origin = self.hpo.adopt(hparams.searched()), inherit.DEFAULT_PERTURBED
        else:
            number, hparams, origin = self._tpe(depth)
        return dataclasses.replace(
            self._live(trial_id, spec, hparams, number, budget, lineage, origin),
            parent=parent,
            morph=morph,
            recipe=recipe,
            first_seconds=self._first_seconds(spec, trained),
            eval_seconds=self._scaled(spec, trained, trained.eval_seconds if trained else None),
            reached=trained.reached if trained is not None else 0.0,
        )

    def _first_seconds(self, spec: Arch, parent: Trained | None) -> float | None:
        """How long a child of ``spec`` should take for its first epoch: its parent's last epoch,
        scaled (:meth:`_scaled`; None: not known, or not needed without a lineage schedule)."""
        if parent is None or not self.mechanisms.lineage_schedule:
            return None
        return self._scaled(spec, parent, parent.epoch_seconds)

    def _scaled(self, spec: Arch, parent: Trained | None, seconds: float | None) -> float | None:
        """``seconds`` of the parent's last epoch as a child of ``spec`` should take them: scaled
        by their training operations per sample (None: not known)."""
        if parent is None or not (seconds and parent.ops_per_sample):
            return None
        return seconds * self.sizes.ops_per_sample(spec) / parent.ops_per_sample

    def _seed(self, trial_id: int, budget: int, depth: int, moment: Moment) -> LiveTrial:
        """The seed network afresh, a lineage's root: with the task's default hyperparameters
        (strategy "seed"; and the run's first trial where children inherit: the lineage most
        children grow from starts from values known to train), else TPE's."""
        spec = self.task.seed_arch(self.data)
        first = trial_id == SEED_TRIAL and self.mechanisms.inherit_hparams
        if self.mechanisms.until_deadline or first:
            hparams = self.task.default_hparams(self.config)
            number, origin = self.hpo.adopt(hparams.searched()), inherit.DEFAULT
        else:
            number, hparams, origin = self._tpe(depth)
        if trial_id == SEED_TRIAL:
            self.parents.add_seed(spec.to_dict(), spec)
        lineage = Lineage(moment.t, 0)
        return self._live(trial_id, spec, hparams, number, budget, lineage, origin)

    def _tpe(self, depth: int) -> tuple[int, Hyperparameters, str]:
        number, drawn = self.hpo.ask(depth=depth)
        return number, Hyperparameters.from_dict(drawn), inherit.TPE

    def _live(
        self,
        trial_id: int,
        spec: Arch,
        hparams: Hyperparameters,
        number: int,
        budget: int,
        lineage: Lineage,
        origin: str,
    ) -> LiveTrial:
        """A trial of ``spec`` without a parent (:meth:`trial` makes a child of one)."""
        arch_hash = spec.content_hash()
        self.seen_hashes.add(arch_hash)
        return LiveTrial(
            id=trial_id,
            parent=None,
            arch=spec.to_dict(),
            arch_hash=arch_hash,
            morph="seed",
            hparams=hparams,
            hpo_number=number,
            budget=budget,
            num_params=spec.num_params(),
            seed=trial_seed(self.config.run.seed, trial_id),
            lineage=lineage,
            hparams_origin=origin,
            spec=spec,
        )

    def fork(
        self, leader: LiveTrial, weights: WeightsRef, grows: bool = False, room: float | None = None
    ) -> Child:
        """A child of the running ``leader`` (:mod:`aihpc.runner.search.fork`), starting from
        ``weights``, a snapshot of its last committed ones: its architecture; or, where it
        ``grows`` (a kept leader whose curve flattened), grown towards ``room`` as a finished
        parent's child grows (:meth:`_morph`), unless the leader is already past ``room`` or no
        new architecture is within ``max_params``."""
        spec = leader.spec if leader.spec is not None else self.task.arch(leader.arch)
        seed = self.rng.getrandbits(63)
        grown = self._grown(spec, seed, room) if grows else None
        after = f"{leader.id} after its epoch {leader.epochs_done}"
        if grown is None:
            return leader.id, spec, self._fork_recipe(leader, weights, seed, 0), f"{FORK} {after}"
        child, steps, morphs = grown
        recipe = self._fork_recipe(leader, weights, seed, steps)
        return leader.id, child, recipe, f"{GROWN_FROM_RUNNING} {after}: {'; '.join(morphs)}"

    def _fork_recipe(self, leader: LiveTrial, weights: WeightsRef, seed: int, steps: int) -> Morph:
        """How a worker makes a child of a running leader from ``weights``, its snapshot:
        ``steps`` growth steps drawn from ``seed`` (0: a copy)."""
        leader_seed = trial_seed(self.config.run.seed, leader.id)
        return Morph(leader.arch, weights, leader_seed, seed, steps, self.max_params)

    def _grown(
        self, spec: Arch, seed: int, room: float | None
    ) -> tuple[Arch, int, list[str]] | None:
        """``spec`` grown towards ``room`` by steps drawn from ``seed``, to an architecture not
        tried, which joins those seen: (child, steps, each step's description); None where
        ``spec`` is already at or past ``room`` or no new architecture is within ``max_params``."""
        if keeps_size(self.sizes, spec, room):
            return None
        try:
            child, steps, morphs = self._grow(spec, seed, room, set())
        except MorphError:
            return None
        self.seen_hashes.add(child.content_hash())
        return child, steps, morphs

    def child(self, room: float | None = None) -> Child:
        """One new child of a parent the strategy chooses; ``room``: the operations one worker can
        still do (None: not known)."""
        parent, children = self.children(1, room)
        return (parent, *children[0])

    def children(
        self, k: int, room: float | None = None
    ) -> tuple[int, list[tuple[Arch, Morph, str]]]:
        """``k`` new architectures morphed from one parent the strategy chooses.

        Returns (parent, [(spec, recipe, how)]).  Before any trial has
        finished, the parent is the seed with its initial weights.  A child
        whose architecture was already tried (or is a sibling's) is morphed
        again; a parent that cannot give ``k`` new children within
        ``max_params`` is passed over for another (the seed, the smallest,
        last).  Only a lone child (``k`` = 1) may keep its parent's
        architecture (:func:`aihpc.runner.search.growth.keeps_size`).
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
                return parent, [self._morph(parent, taken, room, k == 1) for _ in range(k)]
            except MorphError as exc:
                last_error = exc
        raise MorphError(f"no new architecture within max_params={self.max_params}: {last_error}")

    def _morph(
        self, parent: int, taken: set[str], room: float | None, alone: bool
    ) -> tuple[Arch, Morph, str]:
        """One child of ``parent``: its architecture kept (``alone``, a trained parent already
        as large as ``room`` affords, with ``grow_on_plateau``), or grown (towards ``room``) to
        one neither tried nor in ``taken``, which it joins."""
        seed = self.rng.getrandbits(63)
        spec = self.parents.spec(parent)
        grows = self.mechanisms.grow_on_plateau
        if grows and alone and self.parents.trained(parent) is not None:
            if keeps_size(self.sizes, spec, room):
                return spec, self._recipe(parent, seed, 0), EXPLOIT

        try:
            spec, steps, morphs = self._grow(spec, seed, room, taken)
        except MorphError as exc:
            raise MorphError(f"trial {parent}: {exc}") from None
        taken.add(spec.content_hash())
        return spec, self._recipe(parent, seed, steps), "; ".join(morphs)

    def _grow(
        self, spec: Arch, seed: int, room: float | None, taken: set[str]
    ) -> tuple[Arch, int, list[str]]:
        """:func:`aihpc.runner.search.growth.grow` of ``spec`` by steps drawn from ``seed``:
        while a child's training fits in ``room``, the operations one worker can still do (never
        without ``grow_on_plateau``, or with ``room`` not known: one step), and on until the
        architecture is neither tried nor in ``taken`` (a proposal's siblings)."""
        grows = self.mechanisms.grow_on_plateau

        def fits(child: Arch) -> bool:
            return grows and room is not None and self.sizes.min_train_ops(child) <= room

        def is_new(child: Arch) -> bool:
            arch_hash = child.content_hash()
            return arch_hash not in self.seen_hashes and arch_hash not in taken

        return grow(self.task, spec, random.Random(seed), self.max_params, fits, is_new)

    def _recipe(self, parent: int, seed: int, steps: int) -> Morph:
        """How a worker makes the child's weights: ``steps`` growth steps drawn from ``seed``,
        replayed on ``parent``'s."""
        return Morph(
            self.parents.arch(parent),
            self.parents.weights(parent),
            trial_seed(self.config.run.seed, parent),
            seed,
            steps,
            self.max_params,
        )
