"""LMSpec (validation, JSON round trip, content hash, parameter count) and LMNet (shapes,
causality, dtypes, the meta device)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from aihpc.base.errors import SpecError
from aihpc.tasks.language.net import LMNet, lm_state_shapes
from aihpc.tasks.language.spec import LM_FORMAT_VERSION, Block, LMSpec, is_lm_arch, seed_lm_spec
from arch_helpers import mixed_spec, tiny_spec

#: The hash of SPEC below; it changes only if the format or canonical JSON changes.
GOLDEN_HASH = "17c701a00f94b24b46e4bdc167124cf3ebc84112ef36a71a8569844d985cc007"
SPEC = seed_lm_spec(256, 64, 32, 2, 2, 16, 64)


pytestmark = pytest.mark.usefixtures("one_thread")


def spec_dict(**changes: Any) -> dict[str, Any]:
    d = SPEC.to_dict()
    d.update(changes)
    return d


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": 0}, "vocab_size must be an integer >= 1, got 0"),
        ({"context": -3}, "context must be an integer >= 1, got -3"),
        ({"width": 2.5}, "width must be an integer >= 1, got 2.5"),
        ({"width": True}, "width must be an integer >= 1, got True"),
        ({"head_dim": 7}, "head_dim must be even (rotary positions rotate pairs), got 7"),
        ({"head_dim": 0}, "head_dim must be an integer >= 1, got 0"),
        ({"blocks": ()}, "blocks must be a non-empty tuple of Block, got ()"),
        ({"blocks": ({"heads": 1},)}, "blocks must be a non-empty tuple of Block"),
        ({"norm_eps": 0.0}, "norm_eps must be a finite number > 0, got 0.0"),
        ({"norm_eps": math.nan}, "norm_eps must be a finite number > 0, got nan"),
        ({"norm_eps": math.inf}, "norm_eps must be a finite number > 0, got inf"),
        ({"norm_eps": False}, "norm_eps must be a finite number > 0, got False"),
        ({"norm_eps": "1e-5"}, "norm_eps must be a finite number > 0, got '1e-5'"),
        ({"version": 2}, "unsupported LM spec format version 2"),
    ],
)
def test_invalid_spec_is_one_line_naming_the_value(changes: dict[str, Any], message: str) -> None:
    fields = {
        "vocab_size": 256,
        "context": 64,
        "width": 32,
        "head_dim": 16,
        "blocks": (Block(2, 64),),
        **changes,
    }
    with pytest.raises(SpecError) as info:
        LMSpec(**fields)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("heads", "mlp_hidden", "message"),
    [
        (0, 8, "block heads must be an integer >= 1, got 0"),
        (2, -1, "block mlp_hidden must be an integer >= 1, got -1"),
        ("2", 8, "block heads must be an integer >= 1, got '2'"),
    ],
)
def test_invalid_block(heads: Any, mlp_hidden: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Block(heads, mlp_hidden)


def test_norm_eps_is_stored_as_float() -> None:
    spec = LMSpec(8, 4, 8, 2, (Block(1, 8),), norm_eps=1)
    assert isinstance(spec.norm_eps, float) and spec.norm_eps == 1.0


def test_seed_lm_spec() -> None:
    spec = seed_lm_spec(100, 32, 48, 3, 4, 8, 96, norm_eps=1e-6)
    assert spec.blocks == (Block(4, 96),) * 3
    assert (spec.vocab_size, spec.context, spec.width, spec.head_dim) == (100, 32, 48, 8)
    assert spec.layers == 3 and spec.norm_eps == 1e-6 and spec.version == LM_FORMAT_VERSION
    with pytest.raises(SpecError, match="layers must be an integer >= 1, got 0"):
        seed_lm_spec(100, 32, 48, 0, 4, 8, 96)


# -------------------------------------------------------------------------- serialisation
def test_round_trip_and_json() -> None:
    for spec in (SPEC, mixed_spec()):
        d = spec.to_dict()
        assert d["kind"] == "lm"
        again = LMSpec.from_dict(json.loads(json.dumps(d)))
        assert again == spec
        assert again.to_dict() == d
        assert again.content_hash() == spec.content_hash()


def test_hash_is_golden_and_independent_of_key_order() -> None:
    assert SPEC.content_hash() == GOLDEN_HASH
    reordered = dict(reversed(list(SPEC.to_dict().items())))
    assert LMSpec.from_dict(reordered).content_hash() == GOLDEN_HASH


@pytest.mark.parametrize(
    "changes",
    [
        {"vocab_size": 257},
        {"context": 65},
        {"width": 48},
        {"head_dim": 8},
        {"norm_eps": 1e-6},
        {"blocks": (Block(2, 64), Block(3, 64))},
    ],
)
def test_hash_covers_every_field(changes: dict[str, Any]) -> None:
    fields = {k: v for k, v in vars(SPEC).items() if not k.startswith("_")} | changes
    assert LMSpec(**fields).content_hash() != GOLDEN_HASH


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "an LM spec must be a JSON object, got list"),
        ({k: v for k, v in spec_dict().items() if k != "width"}, "missing field(s) width"),
        (spec_dict(depth=3), "unknown field(s) depth; valid: kind, version, vocab_size"),
        (spec_dict(kind="cnn"), "LM spec field 'kind' must be 'lm', got 'cnn'"),
        (spec_dict(blocks={"heads": 1}), "LM spec field 'blocks' must be a list, got dict"),
        (spec_dict(blocks=[{"heads": 1}]), "block 0 is missing field(s) mlp_hidden"),
        (spec_dict(blocks=[{"heads": 1, "mlp_hidden": 4, "x": 1}]), "block 0 has unknown field"),
        (spec_dict(blocks=[{"heads": 1, "mlp_hidden": 4}, 7]), "block 1 must be a JSON object"),
        (
            spec_dict(blocks=[{"heads": 0, "mlp_hidden": 4}]),
            "block 0: block heads must be an integer >= 1, got 0",
        ),
        (spec_dict(context="64"), "context must be an integer >= 1, got '64'"),
    ],
)
def test_from_dict_errors(data: Any, message: str) -> None:
    with pytest.raises(SpecError) as info:
        LMSpec.from_dict(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_is_lm_arch_tells_lm_from_cnn() -> None:
    assert is_lm_arch(SPEC.to_dict())
    assert not is_lm_arch(tiny_spec().to_dict())
    assert not is_lm_arch("lm") and not is_lm_arch(None) and not is_lm_arch({"kind": "cnn"})


# ------------------------------------------------------------------------------- LMNet
@pytest.mark.parametrize("spec", [SPEC, mixed_spec()], ids=["seed", "mixed"])
def test_num_params_and_state_shapes_match_the_net(spec: LMSpec) -> None:
    net = LMNet(spec)
    assert spec.num_params() == sum(p.numel() for p in net.parameters())
    shapes = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert shapes == lm_state_shapes(spec)
    assert list(shapes) == list(lm_state_shapes(spec))  # the same order, too


def test_state_dict_keys_are_the_documented_ones() -> None:
    keys = list(LMNet(seed_lm_spec(10, 4, 8, 1, 1, 2, 8)).state_dict())
    assert keys == [
        "embed.weight",
        "blocks.0.attn_norm.weight",
        "blocks.0.attn.q.weight",
        "blocks.0.attn.k.weight",
        "blocks.0.attn.v.weight",
        "blocks.0.attn.out.weight",
        "blocks.0.mlp_norm.weight",
        "blocks.0.mlp.up.weight",
        "blocks.0.mlp.down.weight",
        "final_norm.weight",
        "unembed.weight",
    ]


def test_forward_shapes_and_length_check() -> None:
    spec = mixed_spec()
    net = LMNet(spec)
    tokens = torch.randint(0, spec.vocab_size, (3, spec.context))
    assert net(tokens).shape == (3, spec.context, spec.vocab_size)
    assert net(tokens[:, :5]).shape == (3, 5, spec.vocab_size)
    with pytest.raises(
        SpecError, match="tokens have 13 positions, more than the spec's context 12"
    ):
        net(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(SpecError, match=r"tokens must be \(batch, positions\), got shape \(12,\)"):
        net(tokens[0])


def test_causal() -> None:
    """Changing token t never changes the logits before t (and does change those at t)."""
    spec = mixed_spec()
    torch.manual_seed(0)
    net = LMNet(spec, dtype=torch.float64)
    tokens = torch.randint(0, spec.vocab_size, (2, spec.context))
    base = net(tokens)
    for t in (0, 4, spec.context - 1):
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 1) % spec.vocab_size
        out = net(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=0)
        assert not torch.allclose(out[:, t:], base[:, t:])


def test_initialisation() -> None:
    spec = seed_lm_spec(500, 16, 64, 8, 4, 16, 256)
    torch.manual_seed(1)
    state = LMNet(spec).state_dict()
    for key, value in state.items():
        if key.endswith("norm.weight"):
            assert torch.equal(value, torch.ones_like(value)), key
        elif key.endswith(("attn.out.weight", "mlp.down.weight")):
            assert value.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05), key
        else:
            assert value.std().item() == pytest.approx(0.02, rel=0.05), key


def test_float64_and_meta_builds() -> None:
    spec = mixed_spec()
    tokens = torch.randint(0, spec.vocab_size, (2, spec.context))
    net64 = LMNet(spec, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in net64.parameters())
    assert net64(tokens).dtype == torch.float64
    assert LMNet(spec).double()(tokens).dtype == torch.float64
    meta = LMNet(spec, device="meta")
    assert all(p.is_meta for p in meta.parameters())
    assert sum(p.numel() for p in meta.parameters()) == spec.num_params()
    out = meta(tokens.to("meta"))
    assert out.is_meta and out.shape == (2, spec.context, spec.vocab_size)


def test_autocast_bf16_on_cpu() -> None:
    """dtype handling is torch's: under autocast the logits come out bf16 and backward runs."""
    spec = mixed_spec()
    net = LMNet(spec)
    tokens = torch.randint(0, spec.vocab_size, (2, spec.context))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(tokens)
    assert logits.dtype == torch.bfloat16
    logits.float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in net.parameters())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_autocast_bf16_on_gpu_matches_float32() -> None:
    spec = seed_lm_spec(1000, 128, 256, 2, 4, 64, 1024)
    torch.manual_seed(0)
    net = LMNet(spec, device="cuda")
    tokens = torch.randint(0, spec.vocab_size, (4, spec.context), device="cuda")
    reference = net(tokens)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = net(tokens)
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - reference).abs().max() < 0.05 * reference.abs().max()
