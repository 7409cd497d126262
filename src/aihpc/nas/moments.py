"""A growth step's two maps: of the parent's weights, and of its optimizer's state.

Every growth step (a CNN morphism, :mod:`aihpc.tasks.image.morphism`; a transformer's
operator, :mod:`aihpc.tasks.language.growth`) is planned as a :class:`Growth`.  Its
``weights`` maps the parent's state dict to the child's, keeping the function.
Its ``moments`` maps the optimizer's per-parameter state of the parent, by
parameter name (:data:`ParamStates`), to the child's, so that a child can go
on with its parent's optimizer instead of a fresh one.

The rule: moments follow the *gradient*, not the weight.  For a step
``w' = plan(w)`` that keeps the function, every child entry that derives from
a parent entry has, at the morph point, the parent entry's gradient times a
factor the step fixes: 1 for a tensor copied unchanged or an entry gathered
unchanged; ``1/a`` for a weight rescaled ``w' = a·w`` (a transformer's norm
gains when its stream widens); for Net2WiderNet, ``1/k`` for the incoming
weights, bias and batch-norm parameters of a unit copied ``k`` times, and 1
for its outgoing weights (those were divided by ``k``, so their gradients are
not).  Each operator's module says which of its entries get which factor.
A first moment (SGD's ``momentum_buffer``, Adam's ``exp_avg``), a sum of
past gradients, is mapped with the factors; a second moment (``exp_avg_sq``),
a sum of their squares, with the squares of the factors (:data:`POWERS`).
Entries that do not derive from the parent (random or zero initialised
within a grown tensor) get zero moments; a whole new tensor (an identity
block, a zero skip connection, a new transformer block) gets no state, as
a fresh optimizer's (Adam's step 0).  A mapped tensor keeps its parent
tensor's step count (Adam's ``step``).

What this means, plainly:

* Adam's bias correction uses the step count: the zero-moment entries of a
  mapped tensor are corrected as entries of an old tensor, not of a new one.
  Under a constant gradient their update is ``(1-β1^t)/sqrt(1-β2^t)`` times
  a fresh optimizer's after ``t`` steps, with torch's betas (0.9, 0.999)
  above 3 from the first step, largest (about 6.6) near the twelfth and
  back towards 1 only over thousands of steps.  These are the new units of
  a widened MLP or stream, new heads, and no entry of a CNN step.
* SGD's ``momentum_buffer`` holds ``gradient + weight_decay · weight``; the
  gradient map is exact for the first term only where a weight and its
  gradient scale alike (a copied or gathered entry: factor 1).  Where they
  do not (Net2WiderNet's divided outgoing weights and its replicated
  incoming ones, rescaled gains), the decay term is mapped with the
  gradient's factor, not the weight's.
* The gradients are those of the function the step keeps: a CNN's in eval
  mode (a deepened identity block's batch norm is the identity with its
  running statistics, not with a batch's), a transformer's as it trains.
  Gradient clipping by the global norm sees the child's norm, which a step
  changes (copies, rescaled gains); the moments carry the clipped history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from aihpc.base.errors import MorphError

#: One parameter's optimizer state as torch keeps it (``optimizer.state[p]``): moments and counts.
ParamState = dict[str, Any]
#: Optimizer states by parameter name (those of ``named_parameters()``).
ParamStates = dict[str, ParamState]
#: A weight map: parent state dict -> child state dict.
StateMap = Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]
#: A moment map: parent optimizer states by name -> the child's.
MomentMap = Callable[[Mapping[str, ParamState]], ParamStates]
#: One tensor's moment map: (parent moment, power of the factors) -> child moment.
Moment = Callable[[torch.Tensor, int], torch.Tensor]

#: The moments torch's optimizers keep per parameter, by the power of the gradient's factor each
#: carries: SGD's momentum, Adam's and AdamW's first and second moments (and AMSGrad's maximum).
POWERS = {"momentum_buffer": 1, "exp_avg": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 2}
#: Per-parameter counts copied from the parent tensor: Adam's steps.
COPIED = ("step",)


@dataclass(frozen=True)
class Growth:
    """A planned growth step's maps of a parent's tensors to its child's (the module docstring)."""

    weights: StateMap
    moments: MomentMap


def map_param(state: Mapping[str, Any], moment: Moment) -> ParamState:
    """One parameter's optimizer state carried into its child tensor: each moment by
    ``moment(tensor, power)`` (:data:`POWERS`), the step count copied; MorphError for an entry
    of another kind (no rule carries it)."""
    out: ParamState = {}
    for key, value in state.items():
        if key in POWERS:
            out[key] = None if value is None else moment(value.detach(), POWERS[key])
        elif key in COPIED:
            out[key] = value.detach().clone() if isinstance(value, torch.Tensor) else value
        else:
            known = ", ".join((*POWERS, *COPIED))
            raise MorphError(
                f"cannot carry the optimizer's {key!r} state through a growth step (known: {known})"
            )
    return out


def copy_states(states: Mapping[str, Mapping[str, Any]]) -> ParamStates:
    """Every parameter's state copied unchanged (the gradient map of a tensor kept as it is)."""
    return {name: map_param(state, _copy) for name, state in states.items()}


def _copy(moment: torch.Tensor, power: int) -> torch.Tensor:
    return moment.clone()


def padded(dim: int, extra: int) -> Moment:
    """The moment map of a tensor grown along ``dim`` by ``extra`` new entries: the parent's
    moments unchanged (factor 1), zero for the new ones."""

    def pad(moment: torch.Tensor, power: int) -> torch.Tensor:
        shape = list(moment.shape)
        shape[dim] = extra
        return torch.cat((moment, moment.new_zeros(shape)), dim=dim)

    return pad


def growing(grown: Mapping[str, Moment]) -> MomentMap:
    """The moment map of a step that grows the tensors named in ``grown`` (each by its moment
    map) and keeps every other."""

    def moments(states: Mapping[str, ParamState]) -> ParamStates:
        out = copy_states(states)
        for key, moment in grown.items():
            if key in states:
                out[key] = map_param(states[key], moment)
        return out

    return moments
