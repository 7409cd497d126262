"""A language model's training passes (aihpc.tasks.language.regions): per-block compilation exactly
LMNet's function, one compiled block for equal blocks and for a child's unchanged ones, bfloat16
compute weights with a float32 master, and all of it through the trainer into results.json.

Most tests compile with dynamo and the "eager" or "aot_eager" backend: dynamo's tracing, guards
and code caches are what they test; one slow test trains with inductor's code against eager.
"""

from __future__ import annotations

import copy
import random
import time

import pytest
import torch
import torch.nn.functional as F

from aihpc.records.messages import DataRef, EpochTask, Morph
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.language.deepen import add_block
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.regions import LMStep, block_regions
from aihpc.tasks.language.spec import LMSpec, seed_lm_spec
from aihpc.tasks.language.widen import add_heads, widen_mlp, widen_stream
from aihpc.train.regions import RegionCache
from aihpc.train.worker import run_epoch

LM = task_of("lm")
SPEC = seed_lm_spec(
    vocab_size=65, context=16, width=32, layers=3, heads=2, head_dim=8, mlp_hidden=64
)
#: Largest relative difference allowed between the per-step losses of inductor's compiled blocks
#: and eager ones over TRAIN_STEPS steps in float32 (the sums in another order: rounding grows
#: through the steps, measured well below this).
LOSS_RTOL = 1e-5
TRAIN_STEPS = 30


def _tokens(spec: LMSpec, seed: int = 1, batch: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (batch, spec.context + 1), generator=g)


def _net(spec: LMSpec = SPEC, dtype: torch.dtype = torch.float64) -> LMNet:
    torch.manual_seed(0)
    return LMNet(spec).to(dtype)


def _loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


# ------------------------------------------------------------------- compiled blocks


def test_compiled_blocks_compute_exactly_what_lmnet_computes() -> None:
    net, ref = _net(), _net()
    cache = RegionCache("eager")
    model = LMStep(net, cache=cache)
    assert list(model.parameters()) == list(net.parameters())  # the network's own tensors
    assert list(model.state_dict()) == [f"net.{k}" for k in net.state_dict()]
    tokens = _tokens(SPEC)
    for _ in ("compiling", "from the cache"):
        loss, expected = _loss(model, tokens), _loss(ref, tokens)
        assert loss.item() == expected.item()
        loss.backward()
        expected.backward()
        for (name, p), q in zip(net.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)
        with torch.no_grad():  # evaluation: the same blocks, eagerly
            x = tokens[:, :-1]
            torch.testing.assert_close(model(x), ref(x), rtol=0, atol=0)
    assert cache.stats().compiled == 1  # training only, once for the three equal blocks


def test_equal_blocks_compile_once_and_a_child_compiles_only_blocks_of_a_new_shape() -> None:
    cache = RegionCache("eager")
    tokens = _tokens(SPEC)

    def compiled_for(spec: LMSpec, state: dict[str, torch.Tensor] | None = None) -> int:
        net = LMNet(spec, dtype=torch.float64)
        if state is not None:
            net.load_state_dict(state)
        before = cache.stats().compiled
        _loss(LMStep(net, cache=cache), tokens).backward()
        return cache.stats().compiled - before

    assert compiled_for(SPEC) == 1
    state = _net().state_dict()
    rng = random.Random(0)
    deeper, _ = add_block(SPEC, state, 1, rng)  # a copy of its neighbours' shape
    assert compiled_for(deeper) == 0
    wider, wide_state = widen_mlp(SPEC, state, 2, 128, rng)  # one block of a new shape
    assert compiled_for(wider, wide_state) == 1
    headed, _ = add_heads(wider, wide_state, 0, 1, rng)  # and another
    assert compiled_for(headed) == 1
    stream, _ = widen_stream(SPEC, state, 48, rng)  # every block new, all three equal
    assert compiled_for(stream) == 1
    assert len({r.signature for r in block_regions(headed)}) == 3
    stats = cache.stats()
    assert stats.hits == 3 * 5 + 1 - stats.compiled  # every block call of the five networks
    assert stats.graphs == stats.compiled and stats.recompiled == stats.eager == 0


def test_another_batch_is_a_new_key_and_the_block_signature_ignores_nothing_it_needs() -> None:
    cache = RegionCache("eager")
    net = _net()
    model = LMStep(net, cache=cache)
    _loss(model, _tokens(SPEC, batch=4)).backward()
    _loss(model, _tokens(SPEC, batch=2)).backward()
    assert cache.stats().compiled == 2 and cache.stats().signatures == 1
    eps = LMSpec.from_dict({**SPEC.to_dict(), "norm_eps": 1e-6})
    assert block_regions(eps)[0].signature != block_regions(SPEC)[0].signature


# ------------------------------------------------------------------- compute weights


def test_a_twin_in_another_dtype_hands_its_gradients_to_the_float32_master() -> None:
    """A float64 twin of a float32 net: its logits are the float64 net's exactly, the masters'
    gradients those gradients rounded to float32, and the optimizer's step reaches the twin."""
    net = _net(dtype=torch.float32)
    ref = copy.deepcopy(net).double()
    model = LMStep(net, compute_dtype=torch.float64)
    assert model.twin is not None and list(net.state_dict()) == list(ref.state_dict())
    tokens = _tokens(SPEC)
    loss, expected = _loss(model, tokens), _loss(ref, tokens)
    assert loss.dtype == torch.float64 and loss.item() == expected.item()
    loss.backward()
    expected.backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters(), strict=True):
        assert p.grad is not None and p.grad.dtype == torch.float32, name
        torch.testing.assert_close(p.grad, q.grad.float(), rtol=0, atol=0, msg=name)
    assert all(c.grad is None for c in model.twin.parameters())  # handed on and freed
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01)
    model.follow(optimizer)
    optimizer.step()
    for (name, p), c in zip(net.named_parameters(), model.twin.parameters(), strict=True):
        torch.testing.assert_close(c, p.double(), rtol=0, atol=0, msg=name)


def test_bfloat16_compute_weights_train_as_float32_does() -> None:
    """The same 20 steps on float32 weights and on bfloat16 compute weights (the trainer's
    choice on a GPU), eager and compiled (aot_eager: the compiled backward hands the twin's
    gradients on too): losses within bfloat16's rounding of float32's."""
    runs = {"float32": (None, None), "bf16": (torch.bfloat16, None)}
    runs["bf16 compiled"] = (torch.bfloat16, RegionCache("aot_eager"))
    losses = {}
    for name, (dtype, cache) in runs.items():
        net = _net(dtype=torch.float32)
        model = LMStep(net, compute_dtype=dtype, cache=cache)
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
        model.follow(optimizer)
        losses[name] = _train(model, net, optimizer, 20)
        assert all(p.dtype == torch.float32 for p in net.state_dict().values())
    assert losses["float32"][-1] < losses["float32"][0] - 0.3  # it learns
    for name in ("bf16", "bf16 compiled"):
        for a, b in zip(losses["float32"], losses[name], strict=True):
            assert abs(a - b) < 0.02 * a, name


def _train(model: torch.nn.Module, net: LMNet, optimizer, steps: int) -> list[float]:
    losses = []
    for step in range(steps):
        loss = _loss(model, _tokens(net.spec, seed=step % 4, batch=8))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_inductor_compiled_blocks_and_eager_train_to_the_same_losses(tmp_path) -> None:
    """TRAIN_STEPS AdamW steps in float32, eager and with inductor's compiled blocks (about 30 s
    here, most of it compiling): every step's loss within LOSS_RTOL."""
    from aihpc.train.regions import use_cache_dir

    use_cache_dir(tmp_path / "inductor")
    losses = []
    for cache in (None, RegionCache("inductor")):
        net = _net(dtype=torch.float32)
        model = LMStep(net, cache=cache)
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
        losses.append(_train(model, net, optimizer, TRAIN_STEPS))
    eager, compiled = losses
    worst = max(abs(a - b) / a for a, b in zip(eager, compiled, strict=True))
    print(f"worst relative loss difference over {TRAIN_STEPS} steps: {worst:.2e}")
    assert worst < LOSS_RTOL and eager[-1] < eager[0] - 0.3


# ------------------------------------------------------------------- through the trainer


def _task(tmp_path, **changes) -> EpochTask:
    options = (
        ("doc_length", 16),
        ("epoch_tokens", 1024),
        ("train_tokens", 4096),
        ("val_tokens", 1024),
        ("vocab_size", 64),
    )
    hp = Hyperparameters(lr=3e-3, batch_size=8, weight_decay=0.01, optimizer="adamw", warmup=0.1)
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=SPEC.to_dict(),
        hparams=hp,
        data=DataRef("synthetic", options=options, task="lm"),
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(tmp_path),
    )
    return EpochTask(**{**base, **changes})


def test_a_compiled_language_trial_and_its_children_count_their_regions(tmp_path, monkeypatch):
    """Per-block compilation through the trainer (aot_eager, to be quick): the seed's three
    equal blocks compile once, a child with one more block compiles nothing, one with a wider
    MLP in one block compiles that block alone, the losses are eager's within rounding, and
    results.json's ``compilation`` adds them up."""
    from aihpc.records.store import RunStore
    from aihpc.results.write import compilation
    from aihpc.train import regions

    monkeypatch.setattr(regions, "_DEFAULT", regions.RegionCache("aot_eager"))
    (tmp_path / "eager").mkdir()
    eager = run_epoch(LM, _task(tmp_path / "eager", trial_id=10, compile=False))
    parent = run_epoch(LM, _task(tmp_path, compile=True))
    assert parent.status == eager.status == "ok", (parent.reason, eager.reason)
    assert parent.metrics["regions_needed"] == 3 and parent.metrics["regions_compiled"] == 1
    assert parent.phase_seconds["compile"] > 0 and "regions_needed" not in eager.metrics
    for key in ("train_loss", "val_loss"):
        assert parent.metrics[key] == pytest.approx(eager.metrics[key], rel=1e-5), key
    results = [parent, eager]
    for trial, (seed, how, needed, compiled) in enumerate(
        ((1, "add block", 4, 0), (5, "widen mlp", 3, 1)), start=1
    ):
        spec, _, described = random_lm_plan(SPEC, random.Random(seed), None)
        assert described.startswith(how)
        morph = Morph(SPEC.to_dict(), parent.weights, 3, seed, steps=1, max_params=None)
        child = run_epoch(
            LM, _task(tmp_path, trial_id=trial, arch=spec.to_dict(), morph=morph, compile=True)
        )
        assert child.status == "ok", child.reason
        assert child.metrics["regions_needed"] == needed, how
        assert child.metrics["regions_compiled"] == compiled, how
        results.append(child)
    store = RunStore(tmp_path / "store")
    try:
        for result in results:
            store.add_epoch(result, attempt=1)
        record = compilation(store)
    finally:
        store.close()
    assert record is not None and record.models == 3 and record.regions_needed == 3 + 4 + 3
    assert record.regions_compiled == 2 and record.regions_from_cache == 8
    assert record.compile_seconds == pytest.approx(
        sum(r.phase_seconds.get("compile", 0.0) for r in results)
    )


def test_an_epoch_near_its_deadline_runs_eager_rather_than_begin_a_compilation(
    tmp_path, monkeypatch
):
    """A compilation cannot be interrupted: an epoch 30 s from its deadline (less than the
    least room, MIN_COMPILE_ROOM_S) whose blocks were never compiled trains eager; with room it
    compiles; once the blocks are in the cache, an epoch near its deadline runs them compiled."""
    from aihpc.train import regions
    from aihpc.train.step_model import MIN_COMPILE_ROOM_S

    monkeypatch.setattr(regions, "_DEFAULT", regions.RegionCache("aot_eager"))
    assert MIN_COMPILE_ROOM_S > 30
    for name in ("near", "far", "cached"):
        (tmp_path / name).mkdir()
    near = run_epoch(LM, _task(tmp_path / "near", compile=True, deadline=time.time() + 30))
    assert near.status == "ok", near.reason
    assert "regions_needed" not in near.metrics and not near.phase_seconds.get("compile")
    far = run_epoch(LM, _task(tmp_path / "far", trial_id=1, compile=True))
    assert far.metrics["regions_needed"] == 3 and far.metrics["regions_compiled"] == 1
    cached = run_epoch(
        LM, _task(tmp_path / "cached", trial_id=2, compile=True, deadline=time.time() + 30)
    )
    assert cached.metrics["regions_needed"] == 3 and cached.metrics["regions_compiled"] == 0


def test_the_room_to_compile_grows_with_the_regions_to_compile_and_the_longest_compilation():
    from aihpc.train.regions import RegionCache
    from aihpc.train.step_model import COMPILE_ROOM, MIN_COMPILE_ROOM_S, room_to_compile

    cache = RegionCache("aot_eager")
    wide = random_lm_plan(SPEC, random.Random(5), None)[0]  # one block of a new shape
    assert not room_to_compile(LM, SPEC, cache, MIN_COMPILE_ROOM_S - 1)
    assert room_to_compile(LM, SPEC, cache, MIN_COMPILE_ROOM_S)
    cache._longest = 100.0  # as after a compilation of 100 s
    need = COMPILE_ROOM * 100.0  # the seed's one block shape
    assert not room_to_compile(LM, SPEC, cache, need - 1) and room_to_compile(LM, SPEC, cache, need)
    need_wide = COMPILE_ROOM * 2 * 100.0  # the child's two shapes (none compiled yet)
    assert not room_to_compile(LM, wide, cache, need_wide - 1)
    assert room_to_compile(LM, wide, cache, need_wide)


# torch.autocast("cuda") made where CUDA is not available says so, and is never entered here
@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_what_the_steps_call_for_a_language_model_by_device_and_processes() -> None:
    """The trainer's choice (aihpc.train.step_model): a GPU's single process computes on
    bfloat16 weights without autocast, data-parallel ranks keep float32 weights under autocast,
    the CPU trains the model itself; compiled or not, as the run says."""
    import contextlib

    from aihpc.train.step_model import step_model_for

    net = _net(dtype=torch.float32)
    optimizer = torch.optim.AdamW(net.parameters())
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    single = step_model_for(LM, net, optimizer, cuda, 1, compiled=True)
    ranks = step_model_for(LM, net, optimizer, cuda, 2, compiled=True)
    assert isinstance(single.module, LMStep) and single.module.twin is not None
    assert single.module.twin.embed.weight.dtype == torch.bfloat16
    assert isinstance(single.autocast, contextlib.nullcontext)
    assert single.compiled_modes == ("train",) and single.regions_needed == SPEC.layers
    assert isinstance(ranks.module, LMStep) and ranks.module.twin is None
    assert isinstance(ranks.autocast, torch.autocast)
    plain = step_model_for(LM, net, optimizer, cpu, 1, compiled=False)
    assert plain.module is net and plain.regions_needed == 0 and not plain.compiled_modes
    assert LM.compile_auto["cuda"] and not LM.compile_auto["cpu"]
