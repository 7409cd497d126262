"""count_spec_per_sample equals count_ops_per_sample bit for bit: on the seeds at several
batch sizes and dropouts, on morphed children (chains of random_plan from the seeds and from a
hand-built network that uses every layer type), and on small networks made to hit the cases
the decomposition has to get right (values feeding several layers, duplicate inputs, layers on
the network input, a network without parameters).  Also: bad input raises what the reference
raises."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from aihpc.base.errors import ConfigError, ModelError, MorphError
from aihpc.recommend.proxies import proxy_ops
from aihpc.recommend.screen import screening_ops
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.count import count_spec_per_sample
from aihpc.tasks.image.layer import INPUT, LAYER_TYPES, Layer
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.image.task import ImageTask

count_ops_per_sample = ImageTask().count_per_sample  # the whole-network count

SEEDS = (((1, 8, 8), 10), ((3, 32, 32), 10), ((3, 64, 64), 100))
BATCHES = (1, 16, 64, 100)
DROPOUTS = (0.0, 0.3)
MAX_PARAMS = 1_000_000


# a one-letter capital name: the layer lists below read like a table
def L(name: str, kind: str, *inputs: str, **fields) -> Layer:
    return Layer(name, kind, tuple(inputs), **fields)


def zoo() -> ArchSpec:
    """Every layer type: a 3-way concat of conv, maxpool and avgpool-grouped-conv branches, a
    3-input add, a concat of two pools, a flat head with dropout, a bias-free dense and relu."""
    layers = [
        L("stem", "conv", INPUT, out_channels=16, kernel_size=3, padding=1),
        L("stem_bn", "bn", "stem"),
        L("r0", "relu", "stem_bn"),
        L("a", "conv", "r0", out_channels=16, kernel_size=1, bias=False),
        L("a_relu", "relu", "a"),
        L("b", "maxpool", "r0", kernel_size=3, stride=1, padding=1),
        L("c_pool", "avgpool", "r0", kernel_size=3, stride=1, padding=1),
        L("c", "conv", "c_pool", out_channels=16, kernel_size=1, groups=4),
        L("cat3", "concat", "a_relu", "b", "c"),
        L("down", "conv", "cat3", out_channels=32, kernel_size=3, stride=2, padding=1),
        L("down_bn", "bn", "down"),
        L("r1", "relu", "down_bn"),
        L("x2", "conv", "r1", out_channels=32, kernel_size=3, padding=1, bias=False),
        L("x2_bn", "bn", "x2"),
        L("x3", "conv", "r1", out_channels=32, kernel_size=1, bias=False),
        L("x3_bn", "bn", "x3"),
        L("add3", "add", "r1", "x2_bn", "x3_bn"),
        L("r2", "relu", "add3"),
        L("mp", "maxpool", "r2", kernel_size=2),
        L("ap", "avgpool", "r2", kernel_size=2),
        L("cat2", "concat", "mp", "ap"),
        L("gap", "global_avgpool", "cat2"),
        L("drop", "dropout", "gap", p=0.0),
        L("hidden", "dense", "drop", out_features=32, bias=False),
        L("hidden_relu", "relu", "hidden"),
        L("fc", "dense", "hidden_relu", out_features=10),
    ]
    return ArchSpec((3, 16, 16), 10, tuple(layers), "fc")


def edge_specs() -> list[ArchSpec]:
    """Small networks for the cases the decomposition must get right."""
    on_input = [  # layers of every per-sample type on the network input, which needs no gradient
        L("i_relu", "relu", INPUT),
        L("i_mp", "maxpool", INPUT, kernel_size=3, stride=1, padding=1),
        L("i_ap", "avgpool", INPUT, kernel_size=3, stride=1, padding=1),
        L("i_drop", "dropout", INPUT),
        L("i_bn", "bn", INPUT),
        L("i_cat", "concat", "i_relu", "i_mp", "i_ap", "i_drop", INPUT, "i_bn"),
        L("conv", "conv", "i_cat", out_channels=8, kernel_size=3, padding=1),
        L("twice", "add", "conv", "conv"),  # one value, two input slots: two gradients
        L("same", "concat", "twice", "twice", "conv"),  # and three (conv: four, with twice's)
        L("mix", "add", "i_relu", INPUT, "i_ap"),  # an add that needs no gradient at all
        L("mix_conv", "conv", "mix", out_channels=24, kernel_size=1),
        L("join", "add", "same", "mix_conv"),
        L("gap", "global_avgpool", "join"),
        L("g_in", "global_avgpool", INPUT),
        L("skip", "dense", "g_in", out_features=24, bias=False),
        L("flat", "add", "gap", "skip"),
        L("d1", "dense", "flat", out_features=5),
        L("d2", "dense", "flat", out_features=5, bias=False),
        L("out_add", "add", "d1", "d2", "d1"),
        L("out", "dropout", "out_add"),  # the logits come out of a dropout
    ]
    free = [L("mean", "global_avgpool", INPUT)]  # no parameters: the logits need no gradient
    deep_flat = [
        L("conv", "conv", INPUT, out_channels=4, kernel_size=3, stride=2, groups=2),
        L("bn", "bn", "conv"),
        L("relu", "relu", "bn"),
        L("gap", "global_avgpool", "relu"),
        L("drop1", "dropout", "gap"),
        L("h", "dense", "drop1", out_features=16),
        L("hr", "relu", "h"),
        L("drop2", "dropout", "hr"),
        L("cat", "concat", "drop2", "hr", "gap"),
        L("fc", "dense", "cat", out_features=3),
    ]
    return [
        ArchSpec((4, 6, 6), 5, tuple(on_input), "out"),
        ArchSpec((10, 4, 4), 10, tuple(free), "mean"),
        ArchSpec((2, 7, 5), 3, tuple(deep_flat), "fc"),
    ]


def morph_chains(roots: list[ArchSpec], count: int, seed: int) -> list[tuple[ArchSpec, str]]:
    """``count`` children: chains of 1 to 10 random_plan steps from a random root."""
    rng = random.Random(seed)
    children: list[tuple[ArchSpec, str]] = []
    while len(children) < count:
        spec = rng.choice(roots)
        for _ in range(rng.randint(1, 10)):
            try:
                spec, _, what = random_plan(spec, rng, MAX_PARAMS)
            except MorphError:
                break
            children.append((spec, what))
    return children[:count]


def roots() -> list[ArchSpec]:
    return [seed_spec(shape, classes) for shape, classes in SEEDS[:2]] + [zoo()]


def assert_same(spec: ArchSpec, batch: int, dropout: float) -> None:
    expected = count_ops_per_sample(spec, batch, dropout)
    got = count_spec_per_sample(spec, batch, dropout)
    assert got == expected, (spec.content_hash()[:12], batch, dropout, got, expected)
    assert all(type(v) is float for v in got)


@pytest.mark.parametrize("shape, classes", SEEDS)
def test_seeds_match_at_every_batch_and_dropout(shape, classes) -> None:
    spec = seed_spec(shape, classes)
    for batch in BATCHES:
        for dropout in DROPOUTS:
            assert_same(spec, batch, dropout)


def test_resnet50_seed_matches() -> None:
    assert_same(seed_spec((3, 96, 96), 10), 2, 0.3)  # maxpool in a seed


def test_zoo_and_edge_networks_match() -> None:
    for spec in [zoo(), *edge_specs()]:
        for batch, dropout in ((1, 0.0), (3, 0.3), (16, 0.5), (5, 1.0)):
            assert_same(spec, batch, dropout)


def test_every_dropout_rate_between_0_and_1_matches() -> None:
    """The layered memo keys a dropout rate by its case (0, 1, or between): the first rate
    between 0 and 1 counted stands for all of them."""
    for spec in (seed_spec((1, 8, 8), 10), edge_specs()[0], edge_specs()[2]):
        for dropout in (0.0, 1e-12, 0.1, 0.25, 0.5, 0.75, 1 - 1e-12, 1.0, 0):
            assert_same(spec, 2, dropout)


CHILDREN = 60  # enough for test_the_corpus_covers_every_layer_type_and_join to pass with margin


@pytest.mark.slow
def test_morphed_children_match() -> None:
    """The children test_the_corpus_covers_every_layer_type_and_join checks the coverage of."""
    rng = random.Random(7)
    children = morph_chains(roots(), CHILDREN, seed=2024)
    for spec, _ in children:
        assert_same(spec, rng.choice(BATCHES), rng.choice(DROPOUTS))


@pytest.mark.slow
def test_more_morphed_children_match_including_resnet50_ones() -> None:
    """Another 40 children of the small roots and 8 of the ResNet-50 seed (maxpool, bottlenecks,
    60 M parameters at most), at the GPU workload's batch sizes and dropouts drawn as trials'.
    Each set holds every morphism kind (widen, deepen, skip); the ResNet-50 ones hold children of
    the seed and children of children, skips of stride 1 and 2, deepens of 1x1 and 3x3 convs and
    widens tied across a stage's residual adds (asserted below)."""
    rng = random.Random(11)
    small = morph_chains(roots(), 40, seed=99)
    assert {what.split()[0] for _, what in small} == {"widen", "deepen", "skip"}
    for spec, _ in small:
        assert_same(spec, rng.choice(BATCHES), rng.uniform(0.0, 0.5))
    resnet = seed_spec((3, 96, 96), 100)
    chain = random.Random(5)
    spec = resnet
    whats: list[str] = []
    restarts = 0
    for _ in range(8):
        restart = chain.random() >= 0.8
        restarts += restart
        spec, _, what = random_plan(resnet if restart else spec, chain, 60_000_000)
        whats.append(what)
        assert_same(spec, rng.choice((128, 256, 512)), rng.uniform(0.0, 0.5))
    assert {what.split()[0] for what in whats} == {"widen", "deepen", "skip"}, whats
    assert 0 < restarts < len(whats) - 1, whats  # chains of several steps, and fresh ones
    for feature in ("stride 1", "stride 2", "(conv1x1-bn-relu)", "(conv3x3-bn-relu)", "(tied: "):
        assert any(feature in what for what in whats), (feature, whats)


def _own_rates(spec: ArchSpec, rates: tuple[float, ...]) -> ArchSpec:
    """``spec`` with its dropout layers at ``rates`` in turn."""
    layers, i = [], 0
    for layer in spec.layers:
        if layer.type == "dropout":
            layer, i = dataclasses.replace(layer, p=rates[i % len(rates)]), i + 1
        layers.append(layer)
    return dataclasses.replace(spec, layers=tuple(layers))


def test_a_screening_counts_what_proxy_ops_counts_of_the_built_network() -> None:
    """A proxy screening's candidates are counted layer by layer, each dropout layer at its own
    rate as SpecNet builds it: the whole-network count of proxy_ops, bit for bit."""
    specs = [
        _own_rates(zoo(), (0.4,)),
        *(_own_rates(s, (0.0, 0.25, 1.0)) for s in edge_specs()),
        *(seed_spec(shape, classes) for shape, classes in SEEDS[:2]),
        *(spec for spec, _ in morph_chains(roots(), 6, seed=5)),
    ]
    for i, spec in enumerate(specs):
        batch = (3, 64)[i % 2]
        got = screening_ops(spec, batch)
        assert got == proxy_ops(SpecNet(spec), batch, spec.input_shape), (i, batch)
        assert type(got[0]) is int and got[0] > 0


def _features(specs: list[ArchSpec]) -> Counter[str]:
    """What the corpus exercises, by name."""
    seen: Counter[str] = Counter()
    for spec in specs:
        uses: Counter[str] = Counter()
        for layer in spec.layers:
            seen[layer.type] += 1
            uses.update(layer.inputs)
            n = len(layer.inputs)
            if layer.type in ("add", "concat"):
                seen[f"{layer.type} of {'2' if n == 2 else '3+'}"] += 1
            if len(set(layer.inputs)) < n:
                seen["an input read twice by one layer"] += 1
            if INPUT in layer.inputs:
                seen[f"{layer.type} on the input"] += 1
            if layer.type == "conv" and layer.groups != 1:
                seen["grouped conv"] += 1
        seen.update("a value read 3+ times" for n in uses.values() if n >= 3)
    return seen


def test_the_corpus_covers_every_layer_type_and_join() -> None:
    children = morph_chains(roots(), CHILDREN, seed=2024)
    seen = _features([zoo(), *edge_specs(), *(spec for spec, _ in children)])
    for kind in LAYER_TYPES:
        assert seen[kind], kind
    for what in (
        "add of 2",
        "add of 3+",
        "concat of 2",
        "concat of 3+",
        "an input read twice by one layer",
        "a value read 3+ times",
        "grouped conv",
        "conv on the input",
        "relu on the input",
        "bn on the input",
        "dropout on the input",
        "global_avgpool on the input",
    ):
        assert seen[what], what
    kinds = Counter(what.split()[0] for _, what in children)
    assert set(kinds) == {"widen", "deepen", "skip"}, kinds
    # the children of the hand-built network, widened through its concats and pools
    from_zoo = [spec for spec, _ in children if "cat3" in {x.name for x in spec.layers}]
    assert len(from_zoo) >= 10
    assert any(spec.shapes()["cat3"] != zoo().shapes()["cat3"] for spec in from_zoo)


def test_a_batch_below_one_is_a_config_error() -> None:
    spec = seed_spec((1, 8, 8), 10)
    for count in (count_ops_per_sample, count_spec_per_sample):
        with pytest.raises(ConfigError, match="batch must be >= 1"):
            count(spec, 0, 0.0)
    # the reference raises torch's RuntimeError (a tensor of negative size) here
    with pytest.raises(ConfigError, match="batch must be >= 1"):
        count_spec_per_sample(spec, -1, 0.0)


@pytest.mark.parametrize("dropout", [1.5, -0.1])
def test_a_dropout_outside_0_1_is_a_model_error(dropout) -> None:
    spec = seed_spec((1, 8, 8), 10)
    for count in (count_ops_per_sample, count_spec_per_sample):
        with pytest.raises(ModelError, match="dropout probability"):
            count(spec, 4, dropout)


def test_batch_norm_of_one_value_per_channel_is_a_model_error() -> None:
    layers = (
        L("conv", "conv", INPUT, out_channels=4, kernel_size=4),
        L("bn", "bn", "conv"),
        L("gap", "global_avgpool", "bn"),
        L("fc", "dense", "gap", out_features=2),
    )
    spec = ArchSpec((1, 4, 4), 2, layers, "fc")
    for count in (count_ops_per_sample, count_spec_per_sample):
        with pytest.raises(ModelError, match="more than 1 value per channel"):
            count(spec, 1, 0.0)
    assert_same(spec, 2, 0.0)
