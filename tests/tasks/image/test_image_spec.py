"""ArchSpec: JSON round trip, hashing, validation and shape inference."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from aihpc.base.errors import SpecError
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.layer import Layer
from aihpc.tasks.image.morphism import random_morph
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from arch_helpers import tiny_spec

# Regenerate (only after an intentional format change, together with a bump of
# FORMAT_VERSION):  .venv/bin/python -c "import sys; sys.path.insert(0, 'tests');
#   from arch_helpers import tiny_spec; print(tiny_spec().content_hash())"
TINY_SPEC_HASH = "3df9ecb2bdb875b5c037dda167639d44bf34eb07e298b2f8585f32ad3bffd351"


def _layers_with(spec: ArchSpec, name: str, **changes: object) -> tuple[Layer, ...]:
    return tuple(replace(x, **changes) if x.name == name else x for x in spec.layers)


def _rebuild(spec: ArchSpec, layers: tuple[Layer, ...], output: str | None = None) -> ArchSpec:
    return ArchSpec(spec.input_shape, spec.num_classes, layers, output or spec.output)


def test_json_round_trip_is_exact() -> None:
    spec = tiny_spec()
    text = spec.to_json()
    again = ArchSpec.from_json(text)
    assert again == spec
    assert again.to_json() == text
    assert ArchSpec.from_dict(json.loads(text)) == spec
    assert json.loads(text) == spec.to_dict()


@pytest.mark.parametrize(
    "shape,size",
    [((1, 8, 8), "auto"), ((3, 32, 32), "auto"), ((3, 224, 224), "auto"), ((3, 20, 24), "tiny")],
)
def test_round_trip_seed_specs(shape: tuple[int, int, int], size: str) -> None:
    spec = seed_spec(shape, 7, size)
    text = spec.to_json()
    assert ArchSpec.from_json(text) == spec
    assert ArchSpec.from_json(text).to_json() == text


def test_save_load(tmp_path) -> None:
    spec = tiny_spec()
    path = tmp_path / "s.json"
    spec.save(path)
    assert ArchSpec.load(path) == spec
    assert path.read_text() == spec.to_json() + "\n"


def test_load_errors_name_the_file(tmp_path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(SpecError, match="nope.json"):
        ArchSpec.load(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="bad.json.*invalid JSON"):
        ArchSpec.load(bad)
    wrong = tmp_path / "wrong.json"
    d = tiny_spec().to_dict()
    d["layers"][4]["inputs"] = ["c2", "ghost"]
    wrong.write_text(json.dumps(d))
    with pytest.raises(SpecError, match="wrong.json.*'a1'.*'ghost'"):
        ArchSpec.load(wrong)


def test_hash_fixed_value() -> None:
    """Catches accidental drift of the canonical form (see TINY_SPEC_HASH)."""
    assert tiny_spec().content_hash() == TINY_SPEC_HASH


def test_hash_independent_of_dict_key_order_and_construction() -> None:
    spec = tiny_spec()
    d = spec.to_dict()
    shuffled = {k: d[k] for k in reversed(list(d))}
    shuffled["layers"] = [{k: x[k] for k in reversed(list(x))} for x in d["layers"]]
    other = ArchSpec.from_dict(shuffled)
    assert other == spec
    assert other.content_hash() == spec.content_hash() == tiny_spec().content_hash()
    assert len(spec.content_hash()) == 64


def test_hash_distinguishes_specs() -> None:
    spec = tiny_spec()
    variants = [
        _rebuild(spec, _layers_with(spec, "c3", out_channels=3)),
        _rebuild(spec, _layers_with(spec, "d", p=0.3)),
        _rebuild(spec, _layers_with(spec, "c1", bias=True)),
        _rebuild(spec, _layers_with(spec, "a1", inputs=("r1", "c2"))),
        ArchSpec((2, 7, 7), 3, spec.layers, "fc"),
    ]
    hashes = {spec.content_hash(), *(v.content_hash() for v in variants)}
    assert len(hashes) == len(variants) + 1
    # morphed children all differ from their ancestors
    rng = random.Random(3)
    s = seed_spec((1, 8, 8), 10, width=4, blocks=1)
    state = SpecNet(s).state_dict()
    seen = {s.content_hash()}
    for _ in range(10):
        s, state, _ = random_morph(s, state, rng)
        assert s.content_hash() not in seen
        seen.add(s.content_hash())
        assert ArchSpec.from_json(s.to_json()) == s
        assert ArchSpec.from_json(s.to_json()).to_json() == s.to_json()


def test_defaults_are_filled_and_compare_equal() -> None:
    a = Layer("c", "conv", ("input",), out_channels=2, kernel_size=3)
    b = Layer(
        "c",
        "conv",
        ["input"],
        out_channels=2,
        kernel_size=3,
        stride=1,
        padding=0,
        groups=1,
        bias=True,
    )
    assert a == b and a.inputs == ("input",)
    pool = Layer("p", "maxpool", ("x",), kernel_size=3)
    assert pool.stride == 3 and pool.padding == 0
    assert Layer("d", "dropout", ("x",)).p == 0.5


def test_shapes_and_params() -> None:
    spec = tiny_spec()
    shapes = spec.shapes()
    assert shapes["input"] == (2, 6, 6)
    assert shapes["c1"] == (4, 6, 6)
    assert shapes["p1"] == (4, 3, 3)
    assert shapes["cat"] == (6, 3, 3)
    assert shapes["ap"] == (6, 3, 3)
    assert shapes["g"] == (6,)
    assert shapes["fc"] == (3,)
    # c1: 4*2*9; b1: 8; c2: 4*4*9+4; c3: 2*4+2; fc: 3*6+3
    assert spec.num_params() == 72 + 8 + 148 + 10 + 21
    assert spec.layer("c3").out_channels == 2
    assert spec.consumers("r1") == ("c2", "a1")
    with pytest.raises(SpecError, match="'nope'"):
        spec.layer("nope")


def test_any_file_order_is_accepted() -> None:
    spec = tiny_spec()
    reordered = _rebuild(spec, tuple(reversed(spec.layers)))
    assert reordered.shapes() == spec.shapes()
    assert reordered.topological_order() == spec.topological_order()
    assert reordered.content_hash() != spec.content_hash()  # file order is covered


def _raises(
    layers: tuple[Layer, ...],
    match: str,
    output: str = "fc",
    input_shape: tuple[int, int, int] = (2, 6, 6),
    num_classes: int = 3,
) -> None:
    with pytest.raises(SpecError, match=match):
        ArchSpec(input_shape, num_classes, layers, output)


def test_add_shape_mismatch_names_layer() -> None:
    spec = tiny_spec()
    _raises(
        _layers_with(spec, "c2", out_channels=8),
        r"'a1' \(add\).*'c2' \(8, 6, 6\).*'r1' \(4, 6, 6\)",
    )


def test_unknown_input_names_layer() -> None:
    _raises(_layers_with(tiny_spec(), "c3", inputs=("p2",)), "'c3'.*unknown input 'p2'")


def test_cycle_is_reported() -> None:
    _raises(_layers_with(tiny_spec(), "c2", inputs=("r2",)), "'c2'.*cycle|cycle")


def test_spatial_size_shrinking_to_zero() -> None:
    layers = _layers_with(tiny_spec(), "c3", kernel_size=5)
    _raises(layers, r"'c3' \(conv\).*shrinks to 0x0")


def test_dense_before_global_pool() -> None:
    layers = _layers_with(tiny_spec(), "fc", inputs=("cat",))
    layers = tuple(x for x in layers if x.name not in ("ap", "g", "d"))
    _raises(layers, r"'fc' \(dense\).*flat")


def test_bn_on_flat_input() -> None:
    layers = _layers_with(tiny_spec(), "d", type="bn", p=None)
    _raises(layers, r"'d' \(bn\).*\(C, H, W\)")


def test_duplicate_and_bad_names() -> None:
    spec = tiny_spec()
    _raises(spec.layers + (Layer("c1", "relu", ("fc",)),), "duplicate layer name 'c1'")
    with pytest.raises(SpecError, match="letters, digits"):
        Layer("a.b", "relu", ("input",))
    with pytest.raises(SpecError, match="reserved"):
        Layer("input", "relu", ("input",))


def test_layer_field_errors() -> None:
    with pytest.raises(SpecError, match="'x'.*unknown type 'softmax'"):
        Layer("x", "softmax", ("input",))
    with pytest.raises(SpecError, match=r"'x' \(conv\) needs field 'kernel_size'"):
        Layer("x", "conv", ("input",), out_channels=3)
    with pytest.raises(SpecError, match=r"'x' \(relu\) takes no field 'out_channels'"):
        Layer("x", "relu", ("input",), out_channels=3)
    with pytest.raises(SpecError, match=r"'x' \(conv\): stride must be an integer >= 1, got 0"):
        Layer("x", "conv", ("input",), out_channels=3, kernel_size=1, stride=0)
    with pytest.raises(SpecError, match=r"'x' \(add\) needs >= 2 inputs, got 1"):
        Layer("x", "add", ("input",))
    with pytest.raises(SpecError, match=r"'x' \(dropout\): p must be a number in \[0, 1\)"):
        Layer("x", "dropout", ("input",), p=1.0)
    with pytest.raises(SpecError, match=r"'x' \(maxpool\): padding must be <= kernel_size/2"):
        Layer("x", "maxpool", ("input",), kernel_size=2, padding=2)
    with pytest.raises(SpecError, match="groups 3"):
        Layer("x", "conv", ("input",), out_channels=4, kernel_size=1, groups=3)


def test_graph_level_errors() -> None:
    spec = tiny_spec()
    _raises(spec.layers, r"output layer 'fc' has shape \(3,\), expected \(5,\)", num_classes=5)
    _raises(spec.layers, "output 'nofc' is not a layer", output="nofc")
    extra = spec.layers + (Layer("dead", "relu", ("r1",)),)
    _raises(extra, "'dead' does not reach the output")
    grouped = _layers_with(spec, "c2", groups=4, out_channels=4)
    assert (
        ArchSpec(spec.input_shape, 3, grouped, "fc").num_params()
        == 4 * 1 * 9 + 4 + 72 + 8 + 10 + 21
    )
    _raises(_layers_with(spec, "c1", groups=4, out_channels=4), r"'c1'.*input channels 2.*groups 4")


def test_from_dict_errors() -> None:
    d = tiny_spec().to_dict()
    with pytest.raises(SpecError, match="unknown field.*colour"):
        ArchSpec.from_dict({**d, "colour": "red"})
    with pytest.raises(SpecError, match="missing field.*output"):
        ArchSpec.from_dict({k: v for k, v in d.items() if k != "output"})
    with pytest.raises(SpecError, match="version 2"):
        ArchSpec.from_dict({**d, "version": 2})
    layers = [dict(x) for x in d["layers"]]
    layers[0]["dilation"] = 2
    with pytest.raises(SpecError, match=r"'c1' \(conv\): unknown field.*dilation"):
        ArchSpec.from_dict({**d, "layers": layers})
    with pytest.raises(SpecError, match="input_shape"):
        ArchSpec.from_dict({**d, "input_shape": [2, 6]})
    with pytest.raises(SpecError, match="num_classes"):
        ArchSpec.from_dict({**d, "num_classes": True})
    with pytest.raises(SpecError, match="invalid JSON"):
        ArchSpec.from_json("[1,")
    with pytest.raises(SpecError, match="JSON object"):
        ArchSpec.from_json("[1, 2]")


def test_hash_is_the_digest_of_the_canonical_json() -> None:
    """content_hash assembles its JSON from per-layer parts: it must digest exactly the canonical
    JSON of to_dict()."""
    import hashlib

    from aihpc.tasks.image.morphism import random_plan

    def reference(s: ArchSpec) -> str:
        text = json.dumps(
            s.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    spec = tiny_spec()
    specs = [
        spec,
        _rebuild(spec, tuple(reversed(spec.layers))),
        seed_spec((3, 224, 224), 1000),
        seed_spec((3, 32, 32), 10),
    ]
    rng = random.Random(5)
    s = seed_spec((1, 8, 8), 10)
    for _ in range(30):  # children share their parent's Layer objects (and their cached parts)
        s = random_plan(s, rng)[0]
        specs.append(s)
    for s in specs:
        assert s.content_hash() == reference(s)


def test_topological_order_takes_the_first_ready_layer_in_file_order() -> None:
    c1 = Layer("c1", "conv", ("input",), out_channels=2, kernel_size=1)
    c2 = Layer("c2", "conv", ("input",), out_channels=2, kernel_size=1)
    r1, r2 = Layer("r1", "relu", ("c1",)), Layer("r2", "relu", ("c2",))
    a = Layer("a", "add", ("r1", "r2"))
    g, fc = Layer("g", "global_avgpool", ("a",)), Layer("fc", "dense", ("g",), out_features=3)
    spec = ArchSpec((1, 4, 4), 3, (fc, g, a, r2, r1, c2, c1), "fc")
    # ready at first: c2 (file position 5) and c1 (6); then r2 (3) before c1
    assert spec.topological_order() == ("c2", "r2", "c1", "r1", "a", "g", "fc")
    in_order = ArchSpec((1, 4, 4), 3, (c1, r1, c2, r2, a, g, fc), "fc")
    assert in_order.topological_order() == ("c1", "r1", "c2", "r2", "a", "g", "fc")
