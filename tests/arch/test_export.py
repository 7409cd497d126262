"""ONNX export: validity, numerical agreement with PyTorch, errors, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from aihpc import models
from aihpc.arch.export import export_onnx, onnx_opset, parse_input_shape
from aihpc.base.errors import ConfigError, ModelError
from aihpc.cli import main


def _batch_dim(path: Path) -> str | int:
    dim = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    return dim.dim_param or dim.dim_value


def _reference(path: Path, x: torch.Tensor) -> np.ndarray:
    (out,) = ReferenceEvaluator(str(path)).run(None, {"input": x.numpy()})
    return out


def _calibrate_batchnorm(model: torch.nn.Module, shape: tuple[int, ...]) -> None:
    """Set every BatchNorm's running statistics to those of one random batch,
    so that eval-mode BN is non-trivial and activations keep unit scale."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average: one batch -> its statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(8, *shape) * 2 + 0.5)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("digits_cnn", (1, 8, 8)),
        ("resnet20", (3, 8, 8)),  # strided slicing + channel padding shortcuts
        # depthwise convs, ReLU6, torchvision layout
        pytest.param("mobilenet_v2", (3, 32, 32), marks=pytest.mark.slow),
    ],
)
def test_onnx_matches_pytorch(tmp_path: Path, name: str, shape: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    model = models.create(name)
    _calibrate_batchnorm(model, shape)
    path = export_onnx(model, tmp_path / f"{name}.onnx", shape, batch=2)
    assert path == tmp_path / f"{name}.onnx" and path.is_file()
    assert model.training, "export_onnx must restore the training mode"
    onnx.checker.check_model(str(path), full_check=True)
    assert _batch_dim(path) == "batch"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left

    model.eval()
    for batch in (2, 3):  # 3 != traced batch: the batch dimension is dynamic
        x = torch.randn(batch, *shape)
        with torch.no_grad():
            expected = model(x).numpy()
        got = _reference(path, x)
        assert got.shape == (batch, models.info(name).num_classes)
        assert np.abs(expected).max() > 0.1  # a meaningful scale for atol
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_opset_is_honoured(tmp_path: Path) -> None:
    model = models.create("digits_cnn")
    for opset in (13, 17):
        path = export_onnx(model, tmp_path / f"d{opset}.onnx", (1, 8, 8), opset=opset)
        assert onnx_opset(path) == opset


@pytest.mark.slow
def test_dynamo_exporter(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = models.create("digits_cnn").eval()
    path = export_onnx(model, tmp_path / "d.onnx", (1, 8, 8), opset=18, dynamo=True)
    assert onnx_opset(path) == 18 and _batch_dim(path) == "batch"
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(_reference(path, x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_imagenet_model_export_at_default_size(tmp_path: Path) -> None:
    """Full-size export; structural check only (the reference evaluator is too
    slow at 224x224; numerics are covered at 32x32 above)."""
    path = export_onnx(models.create("resnet18"), tmp_path / "r18.onnx", (3, 224, 224))
    graph = onnx.load(str(path)).graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 224, 224]
    out_dims = [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["batch", 1000]
    assert onnx_opset(path) == 20


def test_unwritable_paths(tmp_path: Path) -> None:
    model = models.create("digits_cnn")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        export_onnx(model, blocker / "m.onnx", (1, 8, 8))
    with pytest.raises(ConfigError, match="is a directory"):
        export_onnx(model, tmp_path, (1, 8, 8))
    # Missing directories are created.
    assert export_onnx(model, tmp_path / "a" / "b" / "m.onnx", (1, 8, 8)).is_file()


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"input_shape": (1, 8)}, "input_shape must be three integers"),
        ({"input_shape": (1, 0, 8)}, "input_shape must be three integers"),
        ({"batch": 0}, "batch must be an integer >= 1, got 0"),
        ({"opset": 3}, "opset must be an integer >= 7, got 3"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object], text: str) -> None:
    args: dict[str, object] = {"input_shape": (1, 8, 8)} | kwargs
    with pytest.raises(ConfigError, match=text):
        export_onnx(models.create("digits_cnn"), tmp_path / "m.onnx", **args)  # type: ignore[arg-type]
    assert not (tmp_path / "m.onnx").exists()


def test_input_shape_the_model_rejects(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not accept input shape 3x2x2"):
        export_onnx(models.create("vgg_small"), tmp_path / "m.onnx", (3, 2, 2))
    with pytest.raises(ModelError, match="does not accept input shape 2x8x8"):
        export_onnx(models.create("digits_cnn"), tmp_path / "m.onnx", (2, 8, 8))


def test_parse_input_shape() -> None:
    assert parse_input_shape("3x224x224") == (3, 224, 224)
    assert parse_input_shape(" 1X8x8 ") == (1, 8, 8)
    for bad in ("3x224", "3x224x224x1", "axbxc", "3x-1x4", "0x8x8", "", "3*8*8"):
        with pytest.raises(ConfigError, match=repr(bad).replace("*", r"\*")):
            parse_input_shape(bad)


# ------------------------------------------------------------------ CLI


def test_cli_export_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r20.onnx"
    assert (
        main(
            [
                "export",
                "--model",
                "resnet20",
                "--input",
                "1x16x16",
                "--num-classes",
                "4",
                "--batch",
                "2",
                "--opset",
                "17",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert str(out) in printed and "opset 17" in printed and "MB" in printed
    graph = onnx.load(str(out)).graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 1, 16, 16]
    got = _reference(out, torch.randn(3, 1, 16, 16))
    assert got.shape == (3, 4) and np.isfinite(got).all()


@pytest.mark.parametrize(
    "argv, text",
    [
        (["export", "--model", "resnet1000", "OUT"], "unknown model 'resnet1000'"),
        (["export", "--model", "digits_cnn", "--input", "8x8", "OUT"], "'8x8'"),
        (["export", "--model", "digits_cnn", "--batch", "0", "OUT"], "batch must be"),
        (["export", "--model", "digits_cnn", "--num-classes", "0", "OUT"], "num_classes must be"),
    ],
)
def test_cli_export_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], text: str
) -> None:
    argv = [str(tmp_path / "m.onnx") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("aihpc export: error:") and text in err
    assert not (tmp_path / "m.onnx").exists()


def test_cli_export_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_mod = pytest.importorskip("aihpc.tasks.image.spec")
    spec = spec_mod.ArchSpec.from_dict(
        {
            "version": spec_mod.FORMAT_VERSION,
            "input_shape": [1, 8, 8],
            "num_classes": 3,
            "output": "fc",
            "layers": [
                {
                    "name": "c1",
                    "type": "conv",
                    "inputs": ["input"],
                    "out_channels": 4,
                    "kernel_size": 3,
                    "padding": 1,
                },
                {"name": "b1", "type": "bn", "inputs": ["c1"]},
                {"name": "r1", "type": "relu", "inputs": ["b1"]},
                {"name": "gap", "type": "global_avgpool", "inputs": ["r1"]},
                {"name": "fc", "type": "dense", "inputs": ["gap"], "out_features": 3},
            ],
        }
    )
    spec_path = tmp_path / "spec.json"
    spec.save(spec_path)
    out = tmp_path / "spec.onnx"
    assert main(["export", "--spec", str(spec_path), str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert _reference(out, torch.randn(2, 1, 8, 8)).shape == (2, 3)

    assert main(["export", "--spec", str(spec_path), "--input", "3x8x8", str(out)]) == 2
    assert "does not match the spec's input shape 1x8x8" in capsys.readouterr().err
    assert main(["export", "--spec", str(tmp_path / "missing.json"), str(out)]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_cli_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == models.names()
    by_name = {r["name"]: r for r in rows}
    assert by_name["resnet50"]["parameters"] == 25_557_032  # torchvision docs
    assert by_name["digits_cnn"]["input_shape"] == [1, 8, 8]
    assert by_name["resnet20"]["num_classes"] == 10


def test_cli_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in models.names():
        assert name in out
    assert "138.36" in out and "3x224x224" in out and "1x8x8" in out
