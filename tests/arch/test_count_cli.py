"""``aihpc count`` through ``aihpc.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError
from aihpc.cli import main
from aihpc.cli.count import parse_shape


def test_parse_shape() -> None:
    assert parse_shape("3x224x224") == (3, 224, 224)
    assert parse_shape("1X8x8") == (1, 8, 8)
    assert parse_shape("16") == (16,)
    for bad in ("", "3x", "3xx224", "3x-1", "3x0x4", "axb", "3*224*224", "3x2.5"):
        with pytest.raises(ConfigError, match="--input") as info:
            parse_shape(bad)
        assert repr(bad) in str(info.value)


def test_table_for_zoo_model(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aihpc.models")
    assert main(["count", "--model", "resnet18"]) == 0
    out = capsys.readouterr().out
    assert "convolution" in out and "TOTAL" in out
    assert "conv+linear MACs (forward): 1.81 GMACs" in out
    assert "parameters: 11,689,512" in out
    assert "uncounted ops: none" in out and "inference" in out


def test_json_training_step(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aihpc.models")
    assert (
        main(
            [
                "count",
                "--model",
                "resnet18",
                "--input",
                "3x32x32",
                "--batch",
                "2",
                "--train",
                "--num-classes",
                "10",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "resnet18" and doc["input_shape"] == [3, 32, 32]
    assert doc["batch_size"] == 2 and doc["train"] is True
    assert doc["total"] == doc["forward"] + doc["backward"] and doc["backward"] > 0
    assert doc["by_operator"]["convolution"]["backward"] > 0
    assert doc["uncounted"] == {}
    assert doc["parameters"] == 11_689_512 - 1000 * 513 + 10 * 513  # 10-class head


def test_by_module_table(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aihpc.models")
    assert main(["count", "--model", "resnet18", "--by", "module", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "(model)" in out and "  layer1" in out and "layer1.0" not in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no_such_net"], "no_such_net"),
        (["--model", "resnet18", "--input", "3x224xabc"], "'3x224xabc'"),
        (["--model", "resnet18", "--batch", "0"], "batch must be >= 1, got 0"),
        (["--model", "resnet18", "--depth", "-1"], "depth must be >= 0, got -1"),
    ],
)
def test_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("aihpc.models")
    assert main(["count", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == ""
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_model_or_spec_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["count"])
    assert info.value.code == 2


def test_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aihpc.tasks.image.spec")
    spec = {
        "version": 1,
        "input_shape": [3, 8, 8],
        "num_classes": 10,
        "output": "fc",
        "layers": [
            {
                "name": "conv",
                "type": "conv",
                "inputs": ["input"],
                "out_channels": 4,
                "kernel_size": 3,
                "padding": 1,
            },
            {"name": "relu", "type": "relu", "inputs": ["conv"]},
            {"name": "gap", "type": "global_avgpool", "inputs": ["relu"]},
            {"name": "fc", "type": "dense", "inputs": ["gap"], "out_features": 10},
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    assert main(["count", "--spec", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # conv: 8*8 positions x 4 channels x 27 MACs; dense: 4 x 10
    assert doc["conv_linear_macs"] == 8 * 8 * 4 * 27 + 4 * 10
    assert doc["input_shape"] == [3, 8, 8] and doc["spec"] == str(path)
    assert doc["parameters"] == 4 * 27 + 4 + 4 * 10 + 10
    assert main(["count", "--spec", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
