"""Regional compilation: the partition, exactness against SpecNet, and compiling only what is new.

Compiled with dynamo and the "eager" backend (or a backend that records the
graphs it is given, which runs them as they are): dynamo's tracing, guards
and code caches are what is tested; inductor's code generation is not, and
would take minutes here.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.morphism import add_skip, deepen, random_morph, widen
from aihpc.tasks.image.regions import RegionNet, partition
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from aihpc.train.optim import set_dropout
from aihpc.train.regions import RegionCache

TINY = seed_spec((1, 8, 8), 10, width=4, blocks=1)  # stem, 2 blocks, head
BATCH = 4


class Recording:
    """A backend that keeps every graph dynamo gives it and runs it unchanged."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def _net(spec: ArchSpec, seed: int = 0, state=None) -> SpecNet:
    torch.manual_seed(seed)
    net = SpecNet(spec).double()
    if state is not None:
        net.load_state_dict(state)
    return net


def _x(spec: ArchSpec, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, *spec.input_shape, dtype=torch.float64, generator=gen)


def _step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One training forward and backward, then one evaluation forward (no grad), as the trainer."""
    model.train()
    out = model(x)
    (out.square().mean()).backward()
    model.eval()
    with torch.no_grad():
        model(x)
    model.train()
    return out


# ----------------------------------------------------------------- (a) partition


@pytest.mark.parametrize(
    ("shape", "classes", "blocks", "distinct"),
    [
        ((1, 8, 8), 10, 4, 5),  # tiny: 2 stages of 2; stage 1's blocks are equal
        ((3, 16, 16), 50, 9, 7),  # cifar (the CPU default): 3 stages of 3, 2 kinds in each but 1
        ((3, 224, 224), 1000, 16, 10),  # ResNet-50: 3, 4, 6, 3 bottlenecks; 2 kinds a stage
    ],
)
def test_seeds_cut_into_stem_blocks_and_head(shape, classes, blocks, distinct):
    spec = seed_spec(shape, classes)
    regions = partition(spec)
    assert len(regions) == 1 + blocks + 1
    assert sum((r.names for r in regions), ()) == spec.topological_order()
    assert regions[0].input == "input" and regions[-1].output == spec.output
    for before, after in zip(regions, regions[1:], strict=False):
        assert after.input == before.output
    # a block's region ends at its sum; the relu after it opens the next region
    assert all(r.output.endswith("_add") for r in regions[1:-1])
    assert all(r.names[0].endswith("relu") for r in regions[2:])
    assert regions[-1].names[1:] == ("avgpool", "dropout", "fc")
    assert regions[0].names[-1] == ("maxpool" if shape[1] >= 96 else "bn1")
    assert len({r.signature for r in regions}) == distinct


def test_equal_blocks_share_a_signature_whatever_their_names():
    spec = seed_spec((3, 16, 16), 50)
    by_output = {r.output: r.signature for r in partition(spec)}
    assert by_output["layer1_0_add"] == by_output["layer1_1_add"] == by_output["layer1_2_add"]
    assert by_output["layer2_1_add"] == by_output["layer2_2_add"]
    assert by_output["layer2_0_add"] != by_output["layer2_1_add"]  # downsampling block
    assert by_output["layer2_1_add"] != by_output["layer3_1_add"]  # other width and size
    # renamed layers, same structure: same signatures
    data = spec.to_dict()
    new = {layer["name"]: f"x_{layer['name']}" for layer in data["layers"]}
    for layer in data["layers"]:
        layer["name"] = new[layer["name"]]
        layer["inputs"] = [new.get(i, i) for i in layer["inputs"]]
    renamed = ArchSpec.from_dict({**data, "output": new[data["output"]]})
    assert [r.signature for r in partition(renamed)] == [r.signature for r in partition(spec)]
    # the same block in a network with another input size: other shapes, other signature
    small = {r.output: r.signature for r in partition(seed_spec((3, 24, 24), 50))}
    assert small["layer1_1_add"] != by_output["layer1_1_add"]


def test_a_skip_spanning_the_network_leaves_one_region():
    state = SpecNet(TINY).state_dict()
    child, _ = add_skip(TINY, state, "input", "fc")  # the input stays live to the end
    (region,) = partition(child)
    assert region.names == child.topological_order()


# ------------------------------------------------------ (b) exactly SpecNet's values

# the exactness tests share compiled regions, as a worker does
SHARED = RegionCache(backend="eager")


def _assert_same(spec: ArchSpec, cache: RegionCache, state=None, atol=0.0) -> None:
    net, ref = _net(spec, state=state), _net(spec, state=state)
    model = RegionNet(net, cache)
    assert list(model.parameters()) == list(net.parameters())  # the network's own tensors
    assert list(model.state_dict()) == [f"net.{k}" for k in net.state_dict()]
    x = _x(spec)
    for _ in ("compiling", "from the cache"):
        out, expected = _step(model, x), _step(ref, x)
        tol = {"atol": atol, "rtol": atol}
        torch.testing.assert_close(out, expected, **tol)
        for (name, p), q in zip(net.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
        torch.testing.assert_close(net.state_dict(), ref.state_dict(), **tol)  # BN statistics
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(model(x), ref.eval()(x), **tol)


@pytest.mark.parametrize(
    "spec", [TINY, seed_spec((3, 16, 16), 10, width=4, blocks=1)], ids=["tiny", "cifar"]
)
def test_region_net_computes_what_specnet_computes(spec):
    _assert_same(spec, SHARED)


def test_children_of_random_morphisms_compute_what_specnet_computes():
    rng = random.Random(5)
    spec, state = TINY, _net(TINY).state_dict()
    for _ in range(4):
        spec, state, _ = random_morph(spec, state, rng)
        _assert_same(spec, SHARED, state)


def test_aot_eager_backend_agrees_within_rounding():
    _assert_same(TINY, RegionCache(backend="aot_eager"), atol=1e-10)


# --------------------------------------------- (c) a child compiles only its new regions


def test_a_child_compiles_only_the_regions_its_morphism_changed():
    from torch._dynamo.utils import counters  # 1.4 s to import: in the test, not at collection

    backend = Recording()
    cache = RegionCache(backend=backend)
    parent_net = _net(TINY)
    start = counters["stats"]["unique_graphs"]
    _step(RegionNet(parent_net, cache), _x(TINY))
    parent_signatures = {r.signature for r in partition(TINY)}
    assert cache.signatures() == parent_signatures
    # in train and in eval mode
    assert cache.stats().compiled == len(backend.graphs) == 2 * len(parent_signatures)
    state = parent_net.state_dict()
    children = [
        deepen(TINY, state, "layer1_0_relu1")[0],  # inside a block
        deepen(TINY, state, "layer1_0_relu")[0],  # after a block
        widen(TINY, state, "layer2_0_conv1", 16, random.Random(0))[0],
        add_skip(TINY, state, "relu1", "layer2_0_relu1")[0],  # a skip across one block
    ]
    for child in children:
        compiled, graphs, before = cache.stats().compiled, len(backend.graphs), cache.signatures()
        child_signatures = {r.signature for r in partition(child)}
        new = child_signatures - before
        assert new and len(new) < len(child_signatures)  # some regions changed, not all
        if child is children[1]:  # the new conv-bn joins the region of the block before it
            assert len(new) == 1
        _step(RegionNet(_net(child), cache), _x(child))
        stats = cache.stats()
        assert cache.signatures() - before == new
        assert stats.compiled - compiled == len(backend.graphs) - graphs == 2 * len(new)
    assert counters["stats"]["unique_graphs"] - start == len(backend.graphs)  # torch's own count
    stats = cache.stats()
    assert stats.graphs == stats.compiled and stats.recompiled == 0 and stats.eager == 0


def test_a_new_dropout_rate_is_a_new_key_not_a_stale_graph():
    cache = RegionCache(backend="eager")
    net = _net(TINY)
    model = RegionNet(net, cache)
    _step(model, _x(TINY))
    compiled = cache.stats().compiled
    set_dropout(net, 0.25)
    _step(model, _x(TINY))
    assert cache.stats().compiled == compiled + 2  # the head, in train and eval mode
    assert cache.stats().recompiled == 0


def test_another_batch_size_is_a_new_key():
    cache = RegionCache(backend="eager")
    model = RegionNet(_net(TINY), cache).eval()
    with torch.no_grad():
        model(_x(TINY))
        model(_x(TINY)[:2])
    stats = cache.stats()
    assert stats.compiled == 2 * len({r.signature for r in partition(TINY)})
    assert stats.graphs == stats.compiled and stats.recompiled == 0


# ------------------------------------------------------ (d) no silent fall back to eager


def test_many_signatures_are_each_compiled_not_run_eagerly():
    """Dynamo keeps at most recompile_limit (8 by default) compiled variants of one code object,
    then runs it eagerly without a word.  Here the limit is 2, and failing on it is asked for:
    12 distinct regions still each get a graph of their own, and a second pass compiles none."""
    backend = Recording()
    cache = RegionCache(backend=backend)
    widths = (1, 2, 3)
    specs = [seed_spec((1, 8, 8), 10, width=w, blocks=1) for w in widths]
    models = [RegionNet(_net(spec), cache).eval() for spec in specs]
    signatures = {r.signature for m in models for r in m.regions}
    assert len(signatures) == 4 * len(widths) > 8
    x = _x(TINY)
    strict = torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True)
    with strict, torch.no_grad():
        for model in models:
            model(x)
        assert len(backend.graphs) == len(signatures)
        for model in models:
            model(x)
    stats = cache.stats()
    assert len(backend.graphs) == stats.compiled == stats.graphs == len(signatures)
    assert stats.eager == 0 and stats.recompiled == 0
    assert stats.hits == len(signatures)


def test_stats_see_compiled_code_that_torch_dropped():
    """The check above relies on reading dynamo's entries back: dropping them is seen."""
    cache = RegionCache(backend="eager")
    model = RegionNet(_net(TINY), cache).eval()
    with torch.no_grad():
        model(_x(TINY))
    assert cache.stats().eager == 0
    torch._dynamo.reset_code_caches()
    assert cache.stats().eager == cache.stats().compiled > 0


def test_a_deep_copy_computes_the_same_and_shares_the_cache():
    """A deep copy of a region net copies the network, not the cache of compiled code."""
    net = _net(TINY)
    model = copy.deepcopy(RegionNet(net, SHARED))
    assert model.cache is SHARED and model.net is not net
    x = _x(TINY)
    torch.testing.assert_close(model.eval()(x), net.eval()(x), atol=0.0, rtol=0.0)
