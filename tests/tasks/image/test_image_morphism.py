"""Each morphism on its own: structure of the child, function preservation
(float64, eval mode, randomised parent), and MorphError on bad requests."""

from __future__ import annotations

import random

import pytest
import torch

from aihpc.base.errors import MorphError
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.layer import BN_EPS, Layer
from aihpc.tasks.image.morphism import add_skip, deepen, random_morph, widen
from aihpc.tasks.image.seeds import _resnet, seed_spec
from aihpc.tasks.image.spec import ArchSpec
from arch_helpers import inputs_for, model_of, run, tiny_spec

ATOL = 1e-10  # single morphisms in float64: only a few roundings apart


def _check_preserved(parent: ArchSpec, pstate: dict, child: ArchSpec, cstate: dict) -> None:
    x = inputs_for(parent, 4, seed=11)
    expected = run(model_of(parent, pstate), x)
    got = run(model_of(child, cstate), x)  # load_state_dict(strict=True) inside
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def _parent(spec: ArchSpec, seed: int = 0) -> dict:
    return model_of(spec, seed=seed).state_dict()


def _bottleneck_spec() -> ArchSpec:
    return _resnet((3, 16, 16), 5, [4, 8], [1, 1], bottleneck=True, imagenet_stem=True)


# ------------------------------------------------------------------ deepen
@pytest.mark.parametrize("k", [1, 3, 5])
def test_deepen_after_relu(k: int) -> None:
    spec = tiny_spec()
    state = _parent(spec)
    child, cstate = deepen(spec, state, "r1", kernel_size=k)
    assert [x.name for x in child.layers[3:6]] == ["deep1_conv", "deep1_bn", "deep1_relu"]
    assert child.layer("deep1_conv").kernel_size == k
    assert child.layer("c2").inputs == ("deep1_relu",)
    assert child.layer("a1").inputs == ("c2", "deep1_relu")
    torch.testing.assert_close(
        cstate["deep1_bn.running_var"] + BN_EPS,
        torch.ones(4, dtype=torch.float64),
        atol=1e-15,
        rtol=0,
    )
    assert cstate["c1.weight"].data_ptr() != state["c1.weight"].data_ptr()  # no aliasing
    _check_preserved(spec, state, child, cstate)


def test_deepen_after_pool_and_flat_point() -> None:
    spec = tiny_spec()
    state = _parent(spec, 1)
    child, cstate = deepen(spec, state, "p1")
    assert child.layer("c3").inputs == ("deep1_relu",)
    _check_preserved(spec, state, child, cstate)
    seed = seed_spec((1, 8, 8), 4, width=3, blocks=1)
    state = _parent(seed, 2)
    child, cstate = deepen(seed, state, "avgpool")
    assert child.layer("deep1_dense").out_features == 6
    assert child.layer("dropout").inputs == ("deep1_relu",)  # the seed ends avgpool-dropout-fc
    _check_preserved(seed, state, child, cstate)
    grandchild, gstate = deepen(child, cstate, "deep1_relu")
    assert grandchild.layer("deep2_dense").inputs == ("deep1_relu",)
    assert len({spec.content_hash(), child.content_hash(), grandchild.content_hash()}) == 3
    _check_preserved(seed, state, grandchild, gstate)


def test_deepen_errors() -> None:
    spec = tiny_spec()
    state = SpecNet(spec).state_dict()
    with pytest.raises(MorphError, match="no layer named 'r9'"):
        deepen(spec, state, "r9")
    with pytest.raises(MorphError, match=r"'c1' \(conv\) may be negative"):
        deepen(spec, state, "c1")
    with pytest.raises(MorphError, match="'ap'.*may be negative"):
        deepen(spec, state, "ap")  # avgpool of a concat with a conv output
    with pytest.raises(MorphError, match="'input'"):
        deepen(spec, state, "input")
    with pytest.raises(MorphError, match="odd integer >= 1, got 2"):
        deepen(spec, state, "r1", kernel_size=2)
    with pytest.raises(MorphError, match="missing keys.*'c1.weight'"):
        deepen(spec, {k: v for k, v in state.items() if k != "c1.weight"}, "r1")
    bad = dict(state, **{"c2.weight": torch.zeros(4, 4, 1, 1)})
    with pytest.raises(MorphError, match=r"'c2.weight' has shape \(4, 4, 1, 1\).*\(4, 4, 3, 3\)"):
        deepen(spec, bad, "r1")
    with pytest.raises(MorphError, match="unexpected keys.*'zz.weight'"):
        deepen(spec, dict(state, **{"zz.weight": torch.zeros(1)}), "r1")


# ------------------------------------------------------------------- widen
def test_widen_through_add_pool_concat_gap_dropout_dense() -> None:
    spec = tiny_spec()
    state = _parent(spec, 3)
    child, cstate = widen(spec, state, "c1", 7, random.Random(0))
    # c1 and c2 are tied through add a1; c3 and fc read the widened channels.
    assert child.layer("c1").out_channels == 7 and child.layer("c2").out_channels == 7
    assert child.layer("c3").out_channels == 2
    assert child.shapes()["cat"] == (9, 3, 3)
    w, w0 = cstate["c1.weight"], state["c1.weight"]
    torch.testing.assert_close(w[:4], w0, atol=0, rtol=0)
    for j in range(4, 7):  # new units replicate old ones, BN stats with them
        src = next(c for c in range(4) if torch.equal(w[j], w0[c]))
        assert cstate["b1.running_var"][j] == state["b1.running_var"][src]
    _check_preserved(spec, state, child, cstate)


def test_widen_concat_branch_and_determinism() -> None:
    spec = tiny_spec()
    state = _parent(spec, 4)
    child, cstate = widen(spec, state, "c3", 5, random.Random(7))
    assert child.shapes()["cat"] == (9, 3, 3)
    _check_preserved(spec, state, child, cstate)
    again, astate = widen(spec, state, "c3", 5, random.Random(7))
    assert again == child
    assert all(torch.equal(astate[k], cstate[k]) for k in cstate)


def test_widen_residual_stream_and_dense() -> None:
    spec = seed_spec((1, 8, 8), 4, width=3, blocks=1)
    state = _parent(spec, 5)
    child, cstate = widen(spec, state, "layer1_0_conv2", 6, random.Random(1))
    assert child.layer("conv1").out_channels == 6  # the stem feeds stage 1's stream
    assert child.layer("layer2_0_conv1").out_channels == 6  # unchanged (reads it)
    _check_preserved(spec, state, child, cstate)
    deeper, dstate = deepen(spec, state, "avgpool")
    wider, wstate = widen(deeper, dstate, "deep1_dense", 10, random.Random(2))
    assert wider.layer("deep1_dense").out_features == 10
    _check_preserved(spec, state, wider, wstate)


def test_the_copies_of_a_widened_unit_learn_apart() -> None:
    """Equal shares (Net2WiderNet's 1/count) would keep a unit's copies equal under any training
    (the same activation and the same outgoing weights give the same gradients): a widened
    network with no more capacity than its parent.  The unequal shares give each copy its own
    incoming weights after a few steps of SGD."""
    spec = seed_spec((3, 8, 8), 4, width=4, blocks=1)
    child, state = widen(spec, _parent(spec, 3), "layer1_0_conv1", 8, random.Random(0))
    net = model_of(child, state).train()
    torch.manual_seed(1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for _ in range(10):
        x = inputs_for(child, 16, seed=int(torch.randint(0, 1000, ()).item()))
        loss = torch.nn.functional.cross_entropy(net(x), torch.randint(0, 4, (16,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    rows = net.state_dict()["layer1_0_conv1.weight"].reshape(8, -1)
    distances = torch.cdist(rows, rows)[~torch.eye(8, dtype=torch.bool)]
    assert distances.min() > 1e-4, distances.min()


def test_widen_bottleneck_middle_conv() -> None:
    spec = _bottleneck_spec()
    state = _parent(spec, 6)
    for name in ("layer1_0_conv2", "layer2_0_conv2", "layer2_0_conv1", "layer2_0_conv3"):
        child, cstate = widen(
            spec, state, name, 12 if "conv3" not in name else 40, random.Random(3)
        )
        assert child.layer(name).out_channels in (12, 40)
        _check_preserved(spec, state, child, cstate)


def test_widen_resnet50_middle_conv_loads() -> None:
    spec = seed_spec((3, 224, 224), 1000)
    state = SpecNet(spec).state_dict()
    child, cstate = widen(spec, state, "layer3_1_conv2", 320, random.Random(0))
    assert child.num_params() - spec.num_params() == 64 * (
        256 * 9 + 2 + 1024
    )  # conv2 rows, bn2, conv3 columns
    model = SpecNet(child)
    model.load_state_dict(cstate, strict=True)


def test_widen_errors() -> None:
    spec = tiny_spec()
    state = SpecNet(spec).state_dict()
    rng = random.Random(0)
    with pytest.raises(MorphError, match="no layer named 'cx'"):
        widen(spec, state, "cx", 8, rng)
    with pytest.raises(MorphError, match=r"'b1' is a bn; only conv and dense"):
        widen(spec, state, "b1", 8, rng)
    with pytest.raises(MorphError, match="> the current width 4 of layer 'c1', got 4"):
        widen(spec, state, "c1", 4, rng)
    with pytest.raises(MorphError, match="'fc'.*network output 'fc'"):
        widen(spec, state, "fc", 5, rng)
    with pytest.raises(MorphError, match="state dict does not match"):
        widen(spec, {}, "c1", 8, rng)


def _spec(layers: list[Layer], shape: tuple[int, int, int] = (2, 4, 4)) -> ArchSpec:
    return ArchSpec(
        shape,
        3,
        tuple(layers)
        + (
            Layer("g", "global_avgpool", (layers[-1].name,)),
            Layer("fc", "dense", ("g",), out_features=3),
        ),
        "fc",
    )


def test_widen_refusals_in_the_graph() -> None:
    rng = random.Random(0)
    tied_to_input = _spec(
        [
            Layer("c", "conv", ("input",), out_channels=2, kernel_size=1),
            Layer("a", "add", ("c", "input")),
        ]
    )
    with pytest.raises(MorphError, match="'c'.*network input"):
        widen(tied_to_input, SpecNet(tied_to_input).state_dict(), "c", 4, rng)
    grouped = _spec(
        [
            Layer("c", "conv", ("input",), out_channels=4, kernel_size=1),
            Layer("dw", "conv", ("c",), out_channels=4, kernel_size=3, groups=4),
        ]
    )
    with pytest.raises(MorphError, match="grouped conv 'dw'"):
        widen(grouped, SpecNet(grouped).state_dict(), "c", 6, rng)
    tied_concat = _spec(
        [
            Layer("a", "conv", ("input",), out_channels=1, kernel_size=1),
            Layer("b", "conv", ("input",), out_channels=1, kernel_size=1),
            Layer("cat", "concat", ("a", "b")),
            Layer("c", "conv", ("input",), out_channels=2, kernel_size=1),
            Layer("s", "add", ("cat", "c")),
        ]
    )
    with pytest.raises(MorphError, match="'c'.*concat 'cat'"):
        widen(tied_concat, SpecNet(tied_concat).state_dict(), "c", 4, rng)
    # Widening a concat input instead is consistent: 'cat' grows and 'c', tied
    # to it through the add, is widened with the concat's composed map.
    state = _parent(tied_concat, 7)
    child, cstate = widen(tied_concat, state, "a", 3, rng)
    assert child.layer("c").out_channels == 4
    _check_preserved(tied_concat, state, child, cstate)


# ---------------------------------------------------------------- add_skip
def test_add_skip_strided() -> None:
    spec = tiny_spec()
    state = _parent(spec, 8)
    child, cstate = add_skip(spec, state, "r1", "c3")
    conv = child.layer("skip1_conv")
    assert (conv.inputs, conv.out_channels, conv.kernel_size, conv.stride) == (("r1",), 2, 1, 2)
    assert child.layer("skip1_add").inputs == ("c3", "skip1_conv")
    assert child.layer("cat").inputs == ("p1", "skip1_add")
    assert torch.count_nonzero(cstate["skip1_conv.weight"]) == 0
    _check_preserved(spec, state, child, cstate)


@pytest.mark.parametrize(
    "src,dst", [("input", "fc"), ("g", "fc"), ("c2", "c2"), ("input", "a1"), ("b1", "r2")]
)
def test_add_skip_variants(src: str, dst: str) -> None:
    spec = tiny_spec()
    state = _parent(spec, 9)
    child, cstate = add_skip(spec, state, src, dst)
    if dst == "fc":
        assert child.output == "skip1_add"
    _check_preserved(spec, state, child, cstate)
    again, astate = add_skip(child, cstate, src, dst)
    assert "skip2_add" in again.shapes()
    _check_preserved(spec, state, again, astate)


def test_add_skip_errors() -> None:
    spec = tiny_spec()
    state = SpecNet(spec).state_dict()
    with pytest.raises(MorphError, match="'r2' depends on 'c2'.*cycle"):
        add_skip(spec, state, "r2", "c2")
    with pytest.raises(MorphError, match="dst must be a layer"):
        add_skip(spec, state, "r1", "input")
    with pytest.raises(MorphError, match="no layer named 'zz'"):
        add_skip(spec, state, "zz", "c2")
    with pytest.raises(MorphError, match="no layer named 'zz'"):
        add_skip(spec, state, "c1", "zz")
    branches = ArchSpec(
        (1, 6, 6),
        2,
        (
            Layer("pool", "maxpool", ("input",), kernel_size=2),
            Layer("gp", "global_avgpool", ("pool",)),
            Layer("conv", "conv", ("input",), out_channels=2, kernel_size=3, padding=1),
            Layer("gc", "global_avgpool", ("conv",)),
            Layer("cat", "concat", ("gp", "gc")),
            Layer("fc", "dense", ("cat",), out_features=2),
        ),
        "fc",
    )
    bstate = SpecNet(branches).state_dict()
    with pytest.raises(
        MorphError, match=r"cannot connect 'pool' \(1, 3, 3\) to 'conv' \(2, 6, 6\)"
    ):
        add_skip(branches, bstate, "pool", "conv")
    with pytest.raises(MorphError, match=r"cannot connect 'gp' \(1,\) to 'conv'"):
        add_skip(branches, bstate, "gp", "conv")


# ------------------------------------------------------------ random_morph
def test_random_morph_is_deterministic_and_described() -> None:
    spec = seed_spec((1, 8, 8), 4, width=3, blocks=1)
    state = _parent(spec, 10)
    kinds = set()
    for seed in range(12):
        a = random_morph(spec, state, random.Random(seed))
        b = random_morph(spec, state, random.Random(seed))
        assert a[0] == b[0] and a[2] == b[2]
        assert all(torch.equal(a[1][k], b[1][k]) for k in a[1])
        kinds.add(a[2].split()[0])
        _check_preserved(spec, state, a[0], a[1])
    assert kinds == {"widen", "deepen", "skip"}


def test_random_morph_budget() -> None:
    spec = seed_spec((1, 8, 8), 4, width=3, blocks=1)
    state = SpecNet(spec).state_dict()
    n = spec.num_params()
    with pytest.raises(
        MorphError, match=f"parent has {n} parameters, more than max_params={n - 1}"
    ):
        random_morph(spec, state, random.Random(0), max_params=n - 1)
    with pytest.raises(MorphError, match=rf"max_params={n}: the smallest child tried has \d+ "):
        random_morph(spec, state, random.Random(0), max_params=n)
    child, _, _ = random_morph(spec, state, random.Random(0), max_params=n + 200)
    assert n < child.num_params() <= n + 200
    with pytest.raises(MorphError, match="max_params must be an integer >= 1, got 0"):
        random_morph(spec, state, random.Random(0), max_params=0)
    with pytest.raises(MorphError, match="state dict does not match"):
        random_morph(spec, {}, random.Random(0))


def test_new_layer_prefixes_take_the_smallest_free_number() -> None:
    from aihpc.tasks.image.graph import fresh_prefix

    spec = tiny_spec()
    assert fresh_prefix(spec, "deep") == "deep1"
    layers = (
        *spec.layers[:-1],
        Layer("deep1_relu", "relu", ("d",)),
        Layer("deep3_relu", "relu", ("deep1_relu",)),
        Layer("deep2x_relu", "relu", ("deep3_relu",)),
        Layer("deep10_relu", "relu", ("deep2x_relu",)),
        Layer("fc", "dense", ("deep10_relu",), out_features=3),
    )
    named = ArchSpec(spec.input_shape, spec.num_classes, layers, "fc")
    assert fresh_prefix(named, "deep") == "deep2"  # "deep2x_" is not "deep2_"
    assert fresh_prefix(named, "skip") == "skip1"
