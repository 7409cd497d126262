"""The zoo's tokens models: exact parameter counts, the (N*T, vocab) contract,
counted operations against hand formulas, and the CLIs that build them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from aihpc import models
from aihpc.base.errors import ModelError
from aihpc.cli import main
from aihpc.counting import count_ops

SEQUENCE = ["lstm_lm", "transformer_small"]


def lstm_layer_params(inputs: int, hidden: int) -> int:
    """One nn.LSTM layer: four gates, each W_ih (h x in), W_hh (h x h), b_ih and b_hh (h)."""
    return 4 * (hidden * (inputs + hidden) + 2 * hidden)


def lstm_lm_params(vocab: int, emb: int = 200, hidden: int = 200, layers: int = 2) -> int:
    """Embedding V E + LSTM layers (the first fed by E, the rest by H) + decoder H V + V."""
    rnn = lstm_layer_params(emb, hidden) + (layers - 1) * lstm_layer_params(hidden, hidden)
    return vocab * emb + rnn + hidden * vocab + vocab


def transformer_params(vocab: int, d: int = 256, layers: int = 4, context: int = 128) -> int:
    """Token and position embeddings, blocks, final LayerNorm, head with bias."""
    block = (
        2 * d  # ln1
        + 3 * d * d
        + 3 * d  # qkv
        + d * d
        + d  # proj
        + 2 * d  # ln2
        + 4 * d * d
        + 4 * d  # fc1
        + 4 * d * d
        + d
    )  # fc2
    return vocab * d + context * d + layers * block + 2 * d + d * vocab + vocab


def test_registry_metadata() -> None:
    for name, seq_len in (("lstm_lm", 35), ("transformer_small", 128)):
        meta = models.info(name)
        assert meta.input_kind == "tokens"
        assert meta.input_shape == (seq_len,) and meta.num_classes == 10_000
    assert models.info("resnet20").input_kind == "image"


def test_exact_parameter_counts() -> None:
    assert lstm_lm_params(10_000) == 4_653_200
    assert transformer_params(10_000) == 8_322_320
    assert lstm_layer_params(200, 200) == 321_600
    for vocab in (10_000, 33):
        assert models.parameter_count("lstm_lm", num_classes=vocab) == lstm_lm_params(vocab)
        assert models.parameter_count("transformer_small", num_classes=vocab) == transformer_params(
            vocab
        )
    assert models.num_parameters(models.create("lstm_lm")) == 4_653_200
    assert models.num_parameters(models.create("transformer_small")) == 8_322_320


@pytest.mark.parametrize("name", SEQUENCE)
def test_tokens_in_rows_of_logits_out(name: str) -> None:
    torch.manual_seed(0)
    model = models.create(name, num_classes=50).eval()
    x = models.example_input(name, 3, (9,), num_classes=50)
    assert x.dtype == torch.int64 and x.shape == (3, 9)
    assert int(x.min()) >= 0 and int(x.max()) < 50
    with torch.no_grad():
        out = model(x)
    assert out.shape == (3 * 9, 50) and torch.isfinite(out).all()
    # Row n*T + t predicts from tokens[n, :t+1] only: changing token 5 leaves rows t < 5 alone.
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1) % 50
    with torch.no_grad():
        changed = (model(y) - out).abs().amax(dim=1).view(3, 9)
    assert torch.all(changed[:, :5] == 0) and torch.all(changed[:, 5:] > 0)


@pytest.mark.parametrize("name", SEQUENCE)
def test_training_step_with_rows_target(name: str) -> None:
    model = models.create(name, num_classes=40)
    x = models.example_input(name, 2, (6,), num_classes=40)
    logits = model(x)
    target = torch.randint(40, (logits.shape[0],))
    loss = nn.functional.cross_entropy(logits, target)
    loss.backward()
    assert loss.item() == pytest.approx(np.log(40), rel=0.2)
    assert all(p.grad is not None for p in model.parameters())


def test_example_input_defaults_and_errors() -> None:
    assert models.example_input("lstm_lm", 4).shape == (4, 35)
    assert models.example_input("transformer_small", 1).shape == (1, 128)
    image = models.example_input("digits_cnn", 2)
    assert image.dtype == torch.float32 and image.shape == (2, 1, 8, 8)
    with pytest.raises(ModelError, match=r"shape is \(sequence length,\), got \(3, 8, 8\)"):
        models.example_input("lstm_lm", 2, (3, 8, 8))
    with pytest.raises(ModelError, match="batch_size must be an integer >= 1, got 0"):
        models.example_input("lstm_lm", 0)


def test_create_refuses_in_channels_and_bad_vocab() -> None:
    with pytest.raises(
        ModelError, match="in_channels does not apply to 'lstm_lm'.*got in_channels=3"
    ):
        models.create("lstm_lm", in_channels=3)
    with pytest.raises(ModelError, match="in_channels does not apply"):
        models.parameter_count("transformer_small", in_channels=1)
    with pytest.raises(ModelError, match="num_classes must be an integer >= 1, got 0"):
        models.create("transformer_small", num_classes=0)


def test_transformer_refuses_sequences_past_its_context() -> None:
    model = models.create("transformer_small", num_classes=10)
    with pytest.raises(
        ModelError, match="sequence length must be <= the model's context 128, got 129"
    ):
        model(torch.zeros(1, 129, dtype=torch.int64))


def test_lstm_forward_ops_match_hand_formula() -> None:
    """Eval-mode forward of the LSTM on PyTorch's CPU path, per layer of input I, N x T tokens:
    input projections for all steps 2 N T 4H I (+ N T 4H bias), per step the hidden projection
    2 N 4H H (+ N 4H bias) and its add to the input part (N 4H), 3 sigmoid gates (4 each), 2 tanh,
    3 mul, 1 add on N H -> 8 N T H (I + H) + 30 N T H.  Decoder: 2 N T H V + N T V."""
    n, t, e, h, v = 3, 7, 200, 200, 10_000
    count = count_ops(
        models.create("lstm_lm"), models.example_input("lstm_lm", n, (t,)), train=False
    )
    rnn = sum(8 * n * t * h * (i + h) + 30 * n * t * h for i in (e, h))
    assert count.by_module["rnn"]["forward"] == rnn
    assert count.by_module["decoder"]["forward"] == 2 * n * t * h * v + n * t * v
    assert count.by_module.get("encoder", {"forward": 0})["forward"] == 0  # a gather
    assert count.forward == rnn + 2 * n * t * h * v + n * t * v
    assert count.conv_linear_macs == sum(4 * n * t * h * (i + h) for i in (e, h)) + n * t * h * v


def test_transformer_matmul_macs_match_hand_formula() -> None:
    """Per block, R = N T rows: qkv 3 R d^2, proj R d^2, fc1 and fc2 4 R d^2 each (12 R d^2), and
    attention Q K^T and A V, N T^2 d each; head R d V.  Linear ops = 2 MACs + bias per output."""
    n, t, d, layers, v = 2, 16, 256, 4, 10_000
    model = models.create("transformer_small")
    count = count_ops(model, models.example_input("transformer_small", n, (t,)), train=False)
    rows = n * t
    assert count.conv_linear_macs == layers * (12 * rows * d * d + 2 * n * t * t * d) + rows * d * v
    for path, (fan_in, fan_out) in {
        "blocks.0.attn.qkv": (d, 3 * d),
        "blocks.2.attn.proj": (d, d),
        "blocks.1.mlp.fc1": (d, 4 * d),
        "blocks.3.mlp.fc2": (4 * d, d),
        "head": (d, v),
    }.items():
        assert count.by_module[path]["forward"] == 2 * rows * fan_in * fan_out + rows * fan_out
    assert count.by_operator["bmm"]["forward"] == layers * 2 * (2 * n * t * t * d)
    assert count.uncounted == {}


def test_cli_count_and_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", "--model", "lstm_lm", "--batch", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["input_shape"] == [35] and doc["parameters"] == 4_653_200 and doc["batch_size"] == 2
    assert (
        main(
            [
                "count",
                "--model",
                "transformer_small",
                "--input",
                "64",
                "--train",
                "--num-classes",
                "100",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "input 1x64, training step" in out and f"{transformer_params(100):,}" in out
    assert main(["count", "--model", "lstm_lm", "--input", "3x8x8"]) == 2
    assert "(sequence length,)" in capsys.readouterr().err
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["lstm_lm"]["input_kind"] == "tokens" and rows["lstm_lm"]["parameters"] == 4_653_200
    assert rows["resnet20"]["input_kind"] == "image"
    assert main(["models"]) == 0
    assert "35 tokens" in capsys.readouterr().out


@pytest.mark.parametrize("name", SEQUENCE)
def test_export_tokens_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """The ONNX file takes int64 ids at any batch (traced at 2, run at 3) and matches PyTorch."""
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from aihpc.arch.export import export_onnx

    out = tmp_path / f"{name}.onnx"
    assert (
        main(
            [
                "export",
                "--model",
                name,
                "--input",
                "6",
                "--num-classes",
                "20",
                "--batch",
                "2",
                str(out),
            ]
        )
        == 0
    )
    assert "input Nx6" in capsys.readouterr().out
    graph = onnx.load(str(out)).graph
    assert [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [
        "batch",
        6,
    ]
    assert main(["export", "--model", name, "--input", "3x8x8", str(out)]) == 2
    assert "sequence length T >= 1" in capsys.readouterr().err

    torch.manual_seed(0)
    model = models.create(name, num_classes=20).eval()
    export_onnx(model, out, (6,), batch=2, vocab=20)
    x = models.example_input(name, 3, (6,), num_classes=20)
    (got,) = ReferenceEvaluator(str(out)).run(None, {"input": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)
