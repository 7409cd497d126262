"""A child's optimizer through the worker's real path (train/weights.py, the trainer): with
``carry_optimizer`` its first epoch starts from its parent's optimizer state carried through
the recipe's growth steps, without it from a fresh optimizer.  That the moment maps are the
gradient maps is tests/nas/test_moments.py's; here: the parent's file, the names, the
numbering of the child's optimizer, AdamW's step counts."""

from __future__ import annotations

import random
import time

import pytest
import torch

from aihpc.base.errors import StorageError
from aihpc.records.messages import DataRef, EpochTask, Morph
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import seed_lm_spec
from aihpc.train.group import SINGLE
from aihpc.train.trainer import build
from aihpc.train.weights import load, load_optimizer
from aihpc.train.worker import run_epoch

SEED = seed_spec((1, 8, 8), 10)
SGD = Hyperparameters(lr=0.05, batch_size=100, weight_decay=1e-4, momentum=0.9)
LM_SPEC = seed_lm_spec(
    vocab_size=65, context=32, width=32, layers=2, heads=2, head_dim=16, mlp_hidden=64
)
LM_DATA = DataRef(
    "synthetic",
    options=(
        ("doc_length", 32),
        ("epoch_tokens", 4096),
        ("train_tokens", 8192),
        ("val_tokens", 2048),
        ("vocab_size", 64),
    ),
    task="lm",
)
ADAMW = Hyperparameters(lr=3e-3, batch_size=8, weight_decay=0.01, optimizer="adamw", warmup=0.1)
LM_STEPS = 4096 // 32 // 8  # an epoch's steps: its windows over the batch


def _task(tmp_path, spec, **changes) -> EpochTask:
    image = not hasattr(spec, "vocab_size")
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=spec.to_dict(),
        hparams=SGD if image else ADAMW,
        data=DataRef("digits") if image else LM_DATA,
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(tmp_path),
    )
    return EpochTask(**{**base, **changes})


def _child(tmp_path, parent_spec, parent, seed: int, steps: int, carry: bool) -> EpochTask:
    """The first epoch of a child grown by ``steps`` random steps from ``parent``'s file."""
    kind = task_of("image" if parent_spec is SEED else "lm")
    spec, rng = parent_spec, random.Random(seed)
    for _ in range(steps):
        spec = kind.plan(spec, rng, None)[0]
    morph = Morph(parent_spec.to_dict(), parent.weights, 3, seed, steps, max_params=None)
    return _task(tmp_path, spec, trial_id=1, morph=morph, carry_optimizer=carry)


def _expected(kind_name: str, task: EpochTask, parent_state: dict, names: list[str]) -> dict:
    """The parent file's optimizer state, its parameters named in ``names`` (the parent model's
    order), carried through the recipe's steps by their moment maps."""
    states = {names[i]: s for i, s in parent_state["state"].items()}
    kind, morph = task_of(kind_name), task.morph
    spec, rng = kind.arch(morph.parent_arch), random.Random(morph.seed)
    for _ in range(morph.steps):
        spec, growth, _ = kind.plan(spec, rng, None)
        states = growth.moments(states)
    return states


def _by_name(setup) -> dict:
    """The built optimizer's state by the model's parameter names."""
    names = {id(p): n for n, p in setup.model.named_parameters()}
    return {names[id(p)]: s for p, s in setup.optimizer.state.items()}


def test_an_image_child_starts_from_its_parents_momentum_carried_through_its_recipe(tmp_path):
    parent = run_epoch(task_of("image"), _task(tmp_path, SEED))
    assert parent.status == "ok", parent.reason
    task = _child(tmp_path, SEED, parent, seed=11, steps=3, carry=True)
    carried = _by_name(build(task_of("image"), task, torch.device("cpu"), SINGLE, compiled=False))
    names = [n for n, _ in SpecNet(SEED).named_parameters()]
    expected = _expected("image", task, load(tmp_path, parent.weights)[1], names)
    assert carried and carried.keys() == expected.keys()
    for name, state in expected.items():
        torch.testing.assert_close(
            carried[name]["momentum_buffer"], state["momentum_buffer"], atol=0, rtol=0
        )
    fresh = _child(tmp_path, SEED, parent, seed=11, steps=3, carry=False)
    assert not build(task_of("image"), fresh, torch.device("cpu"), SINGLE, False).optimizer.state
    assert run_epoch(task_of("image"), task).status == "ok"


def test_a_language_child_goes_on_with_its_parents_adamw_moments_and_steps(tmp_path):
    parent = run_epoch(task_of("lm"), _task(tmp_path, LM_SPEC))
    assert parent.status == "ok", parent.reason
    # a new first block: every parent tensor moves up one block, the new block starts fresh
    seed = next(
        s for s in range(100) if "add block 0" in random_lm_plan(LM_SPEC, random.Random(s))[2]
    )
    task = _child(tmp_path, LM_SPEC, parent, seed=seed, steps=1, carry=True)
    carried = _by_name(build(task_of("lm"), task, torch.device("cpu"), SINGLE, compiled=False))
    names = [n for n, _ in LMNet(LM_SPEC, device="meta").named_parameters()]
    expected = _expected("lm", task, load(tmp_path, parent.weights)[1], names)
    assert carried.keys() == expected.keys() and not any(n.startswith("blocks.0.") for n in carried)
    assert {float(s["step"]) for s in carried.values()} == {LM_STEPS}  # the parent's steps
    for name, state in expected.items():
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(carried[name][key], state[key], atol=0, rtol=0)
    # its epoch trains on from them: a carried tensor has taken the parent's steps and its own
    child = run_epoch(task_of("lm"), task)
    assert child.status == "ok", child.reason
    steps = {n: float(s["step"]) for n, s in _file_states(tmp_path, child, task).items()}
    assert steps["blocks.1.attn.q.weight"] == 2 * LM_STEPS
    assert steps["blocks.0.attn.q.weight"] == LM_STEPS
    fresh = run_epoch(
        task_of("lm"), _child(tmp_path, LM_SPEC, parent, seed=seed, steps=1, carry=False)
    )
    assert {float(s["step"]) for s in _file_states(tmp_path, fresh, task).values()} == {LM_STEPS}


def _file_states(tmp_path, result, task: EpochTask) -> dict:
    """The optimizer state an epoch's file holds, by the parameter names of its model."""
    with torch.device("meta"):
        names = [
            n for n, _ in task_of("lm").model(task_of("lm").arch(task.arch)).named_parameters()
        ]
    return {names[i]: s for i, s in load(tmp_path, result.weights)[1]["state"].items()}


def test_an_optimizer_state_that_does_not_fit_the_model_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    saved = optimizer.state_dict()
    again = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    load_optimizer(again, model, saved)  # by position, keeping its own hyperparameters
    assert again.param_groups[0]["momentum"] == 0.5
    assert torch.equal(
        again.state[model[1].bias]["momentum_buffer"],
        optimizer.state[model[1].bias]["momentum_buffer"],
    )
    short = {**saved, "param_groups": [{**saved["param_groups"][0], "params": [0, 1, 2]}]}
    with pytest.raises(StorageError, match="holds 3 parameters, the model 4"):
        load_optimizer(again, model, short)
    named = {
        **saved,
        "param_groups": [
            {"params": [0, 1, 2, 3], "param_names": ["0.weight", "0.bias", "1.bias", "1.weight"]}
        ],
    }
    with pytest.raises(
        StorageError,
        match=r"'momentum_buffer' of parameter '1.bias' has shape \(2, 2\), the parameter \(2,\)",
    ):
        load_optimizer(again, model, named)
    named["param_groups"][0]["param_names"][0] = "2.weight"
    with pytest.raises(StorageError, match="names parameter '2.weight', not the model's"):
        load_optimizer(again, model, named)
