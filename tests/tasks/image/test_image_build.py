"""SpecNet: forward against a hand-written reference, state dict layout,
tracing and ONNX export."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from aihpc.base.errors import SpecError
from aihpc.tasks.image.build import SpecNet, state_shapes
from aihpc.tasks.image.layer import Layer
from aihpc.tasks.image.spec import ArchSpec
from arch_helpers import inputs_for, model_of, run, tiny_spec


def _reference(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """tiny_spec() written out by hand with torch.nn.functional (eval mode)."""

    def bn(name: str, t: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            t,
            sd[f"{name}.running_mean"],
            sd[f"{name}.running_var"],
            sd[f"{name}.weight"],
            sd[f"{name}.bias"],
            False,
            0.0,
            1e-5,
        )

    r1 = F.relu(bn("b1", F.conv2d(x, sd["c1.weight"], None, padding=1)))
    c2 = F.conv2d(r1, sd["c2.weight"], sd["c2.bias"], padding=1)
    p1 = F.max_pool2d(F.relu(c2 + r1), 2)
    c3 = F.conv2d(p1, sd["c3.weight"], sd["c3.bias"])
    ap = F.avg_pool2d(torch.cat([p1, c3], 1), 3, 1, 1)
    return F.linear(ap.mean(dim=(2, 3)), sd["fc.weight"], sd["fc.bias"])


def test_forward_matches_hand_written_reference() -> None:
    spec = tiny_spec()
    model = model_of(spec, seed=1)
    x = inputs_for(spec, 4)
    out = run(model, x)
    assert out.shape == (4, 3)
    torch.testing.assert_close(out, _reference(model.state_dict(), x), atol=1e-12, rtol=0)


def test_state_dict_layout() -> None:
    spec = tiny_spec()
    model = SpecNet(spec)
    assert isinstance(model, SpecNet) and model.spec is spec
    sd = model.state_dict()
    assert set(sd) == {
        "c1.weight",
        "b1.weight",
        "b1.bias",
        "b1.running_mean",
        "b1.running_var",
        "b1.num_batches_tracked",
        "c2.weight",
        "c2.bias",
        "c3.weight",
        "c3.bias",
        "fc.weight",
        "fc.bias",
    }
    assert {k: tuple(v.shape) for k, v in sd.items()} == state_shapes(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()


def test_layer_order_in_file_does_not_change_the_function() -> None:
    spec = tiny_spec()
    reordered = ArchSpec(spec.input_shape, 3, tuple(reversed(spec.layers)), "fc")
    a = model_of(spec, seed=2)
    b = model_of(reordered, a.state_dict())
    x = inputs_for(spec)
    torch.testing.assert_close(run(a, x), run(b, x), atol=0, rtol=0)


def test_train_mode_runs_and_updates_bn() -> None:
    spec = tiny_spec()
    model = SpecNet(spec).train()
    out = model(torch.randn(5, 2, 6, 6))
    out.sum().backward()
    assert model["c1"].weight.grad is not None
    assert int(model["b1"].num_batches_tracked) == 1


@pytest.mark.parametrize("name", ["spec", "forward", "keys", "training"])
def test_names_clashing_with_module_attributes(name: str) -> None:
    spec = ArchSpec(
        (1, 4, 4),
        2,
        (
            Layer(name, "relu", ("input",)),
            Layer("g", "global_avgpool", (name,)),
            Layer("fc", "dense", ("g",), out_features=2),
        ),
        "fc",
    )
    with pytest.raises(SpecError, match=f"'{name}' clashes"):
        SpecNet(spec)


def test_traceable() -> None:
    spec = tiny_spec()
    model = model_of(spec, seed=3)
    x = inputs_for(spec)
    traced = torch.jit.trace(model, x)
    x2 = inputs_for(spec, 5, seed=9)
    torch.testing.assert_close(traced(x2), run(model, x2), atol=1e-12, rtol=0)


def test_onnx_export() -> None:
    onnx = pytest.importorskip("onnx")
    spec = tiny_spec()
    model = SpecNet(spec).eval()
    buf = io.BytesIO()
    torch.onnx.export(
        model,
        (torch.randn(1, 2, 6, 6),),
        buf,
        dynamo=False,
        input_names=["x"],
        output_names=["logits"],
    )
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "Relu", "Add", "MaxPool", "Concat", "AveragePool", "Gemm"} <= ops


def test_torch_export() -> None:
    spec = tiny_spec()
    model = model_of(spec, seed=4)
    x = inputs_for(spec, 2)
    program = torch.export.export(model, (x,))
    torch.testing.assert_close(program.module()(x), run(model, x), atol=1e-12, rtol=0)


@pytest.mark.slow
def test_onnx_export_dynamo() -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    model = SpecNet(tiny_spec()).eval()
    program = torch.onnx.export(model, (torch.randn(1, 2, 6, 6),), dynamo=True, verbose=False)
    onnx.checker.check_model(program.model_proto)
    assert "Concat" in {n.op_type for n in program.model_proto.graph.node}
