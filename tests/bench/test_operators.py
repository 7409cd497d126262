"""Level 0 (``aihpc bench operators``): validation numbers, wrong operators
reported failed and untimed, the rate and byte conventions, and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import torch

from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.bench import operators as ops
from aihpc.bench.op_catalogue import CATALOGUE, Function, OpCase, register, unregister
from aihpc.bench.op_check import build_case, check_case, errors
from aihpc.bench.timing import Timing
from aihpc.roofline.model import Roofline
from fixture_run import aihpc_in_process
from kind_files import roofline_file as roofline_file_of

CPU = torch.device("cpu")
ROOF = Roofline(device="cpu", peaks={"float32": 2e10, "bfloat16": 8e10}, bandwidth=4e9)


def _vector_case(name: str, module: torch.nn.Module, reference: object) -> OpCase:
    """An element-wise operator on one (batch, features) input."""

    def build(shape: dict[str, int], dtype: torch.dtype, device: torch.device) -> tuple:
        return module, (torch.randn(shape["batch"], shape["features"], dtype=dtype, device=device),)

    small = dict(batch=8, features=16)
    return OpCase(name, "test", build, reference, small, small, dict(batch=2, features=3))


class _ReluWrongBackward(torch.autograd.Function):
    """ReLU whose forward is right and whose backward is 1% too large."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x > 0) * 1.01


def _relu_reference(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.zeros_like(x))


@pytest.fixture
def wrong_forward() -> Iterator[OpCase]:
    """A ReLU whose output is 1% too large, registered in the public catalogue."""
    case = register(
        _vector_case("wrong_forward", Function(lambda x: torch.relu(x) * 1.01), _relu_reference)
    )
    yield case
    unregister(case.name)


@pytest.fixture
def wrong_backward() -> Iterator[OpCase]:
    case = register(
        _vector_case("wrong_backward", Function(_ReluWrongBackward.apply), _relu_reference)
    )
    yield case
    unregister(case.name)


@pytest.fixture
def roofline_file(tmp_path: Path) -> Path:
    """A roofline result file as ``aihpc roofline`` writes it (peaks given, not measured)."""
    return roofline_file_of(tmp_path / "roofline.json", ROOF)


# ------------------------------------------------------------- validation
def test_errors_hand_worked() -> None:
    l2, max_abs = errors(
        [torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 2.02], dtype=torch.float64)]
    )
    assert l2 == pytest.approx(0.02 / (1 + 2.02**2) ** 0.5, rel=1e-6)
    assert max_abs == pytest.approx(0.02, rel=1e-5)
    assert errors([None], [torch.ones(2)]) == (float("inf"), float("inf"))


def test_conv1x1_count_and_float32_error() -> None:
    case = CATALOGUE["conv1x1"]
    n, cin, hw, cout = 2, 16, 14, 16
    assert case.shape(quick=True) == dict(batch=n, cin=cin, hw=hw, cout=cout)
    module, inputs = build_case(case, case.shape(quick=True), torch.float32, CPU)
    forward, total, uncounted = ops.count_case(module, inputs)
    macs = n * hw * hw * cin * cout
    assert forward == 2 * macs + n * hw * hw * cout  # + the bias: 1 add per output element
    # backward: input and weight gradients (the forward MACs each), bias gradient a sum of N*H*W per
    # channel
    assert total - forward == 2 * 2 * macs + cout * (n * hw * hw - 1)
    assert uncounted == {}
    validation, _ = ops.validate(case, module, inputs, "float32", check_case(case, CPU))
    assert validation.passed
    assert validation.l2 < 1e-5 and validation.grad_l2 < 1e-5
    assert validation.gradcheck and validation.float64_l2 < 1e-12


def test_every_catalogue_operator_validates() -> None:
    """Each reference agrees with its candidate in float64; each backward with finite
    differences."""
    for case in CATALOGUE.values():
        check = check_case(case, CPU)
        assert check.problems() == [], case.name
        module, inputs = build_case(case, case.shape(quick=True), torch.float32, CPU)
        validation, _ = ops.validate(case, module, inputs, "float32", check)
        assert validation.passed, (case.name, validation.reason)


def test_wrong_forward_is_failed_and_untimed(wrong_forward: OpCase) -> None:
    result = ops.run_operators([wrong_forward], ("float32", "bfloat16"), "cpu", ROOF, quick=True)
    assert result.failed == ["wrong_forward"]
    for row in result.rows:
        assert row.validation.status == "failed"
        assert row.forward is None and row.forward_backward is None
        assert row.validation.gradcheck  # its backward matches its (wrong) forward
        assert row.validation.float64_l2 == pytest.approx(0.01, rel=1e-6)
    float32, bfloat16 = result.rows
    assert float32.validation.l2 == pytest.approx(0.01, rel=1e-3)
    assert (
        "float64 output differs" in bfloat16.validation.reason
    )  # 1% hides in bfloat16 rounding otherwise
    assert result.to_record(1.0).points == ()


def test_wrong_backward_fails_gradcheck(wrong_backward: OpCase) -> None:
    check = check_case(wrong_backward, CPU)
    assert not check.gradcheck and check.l2 == 0.0
    result = ops.run_operators([wrong_backward], ("float32",), "cpu", ROOF, quick=True)
    (row,) = result.rows
    assert row.validation.status == "failed" and row.forward is None
    assert row.validation.l2 == 0.0 and row.validation.grad_l2 == pytest.approx(0.01, rel=1e-3)
    assert "gradcheck" in row.validation.reason


# ------------------------------------------------------- rates and bytes
def test_pass_result_rates() -> None:
    timing = Timing(median=0.002, iqr=0.0001, spread=0.05, blocks=5, calls=50, warning=None)
    result = ops.pass_result(
        ops=8_000_000, nbytes=1_000_000, timing=timing, roofline=ROOF, dtype="float32"
    )
    assert result.flops_per_s == pytest.approx(4e9)  # ops / median seconds
    assert result.bytes_per_s == pytest.approx(5e8)
    assert result.intensity == pytest.approx(8.0)
    assert result.roofline_share == pytest.approx(4e9 / min(2e10, 8.0 * 4e9))
    assert result.warning is None
    unknown = ops.pass_result(8_000_000, 1_000_000, timing, ROOF, "float16")
    assert unknown.roofline_share is None  # no measured float16 peak: "unknown"
    few = Timing(median=0.5, iqr=0.0, spread=0.0, blocks=1, calls=1, warning=None)
    assert "spread is not measured" in ops.pass_result(1, 1, few, ROOF, "float32").warning


def test_bytes_convention() -> None:
    module, inputs = build_case(CATALOGUE["matmul"], dict(m=3, k=4, n=5), torch.float32, CPU)
    output = module(*inputs)
    forward, total = ops.traffic(module, inputs, (output,))
    assert forward == 4 * (3 * 4 + 4 * 5 + 3 * 5)  # input, weight, output
    assert total == forward + 4 * (3 * 5) + 4 * (
        3 * 4 + 4 * 5
    )  # + output gradient, + input and weight gradients
    module, inputs = build_case(
        CATALOGUE["cross_entropy"], dict(batch=3, classes=4), torch.float32, CPU
    )
    forward, total = ops.traffic(module, inputs, (module(*inputs),))
    assert forward == 4 * 12 + 8 * 3 + 4  # logits, int64 targets, scalar loss
    assert total == forward + 4 + 4 * 12  # targets are data: no gradient


def test_timed_row_rates_follow_counts() -> None:
    settings = (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
    )
    result = ops.run_operators([CATALOGUE["relu"]], ("float32",), "cpu", ROOF, quick=True)
    assert (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
    ) == settings
    (row,) = result.rows
    n = 64 * 1024
    assert row.validation.passed and row.uncounted == {}
    assert row.forward.ops == n and row.forward_backward.ops == 3 * n  # max(x, 0); compare + select
    assert row.forward.bytes == 2 * 4 * n and row.forward_backward.bytes == 4 * 4 * n
    for p in (row.forward, row.forward_backward):
        assert p.flops_per_s == pytest.approx(p.ops / p.seconds)
        assert p.bytes_per_s == pytest.approx(p.bytes / p.seconds)
        assert p.roofline_share == pytest.approx(
            p.flops_per_s / ROOF.attainable(p.intensity, "float32")
        )
    data = result.to_record(1.0)
    assert [p.label for p in data.points] == ["relu fwd", "relu fwd+bwd"]
    assert [p.pass_ for p in data.points] == ["fwd", "fwd+bwd"]
    assert data.sweep_seconds == result.seconds and data.seconds == 1.0


def test_shape_too_large_for_memory() -> None:
    with pytest.raises(
        OutOfMemory, match=r"^operator conv1x1 at batch=\d+ .* does not fit in the memory of cpu"
    ):
        ops.run_operators(
            [CATALOGUE["conv1x1"]], ("float32",), "cpu", None, quick=True, scale=10**9
        )


def test_dtype_resolution() -> None:
    assert ops.resolve_dtypes(["float32,bfloat16", "float32"], "cpu") == ("float32", "bfloat16")
    assert "float32" in ops.resolve_dtypes(None, "cpu")
    with pytest.raises(ConfigError, match="got 'int8'"):
        ops.resolve_dtypes(["int8"], "cpu")


# -------------------------------------------------------------------- CLI
def _cli(capsys: pytest.CaptureFixture[str], *args: str, cwd: Path) -> CompletedProcess[str]:
    return aihpc_in_process(capsys, "bench", "operators", *args, cwd=cwd)


def test_cli_quick(tmp_path: Path, roofline_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ops.json"
    proc = _cli(
        capsys,
        "--quick",
        "--ops",
        "conv3x3,matmul",
        "--dtype",
        "float32",
        "--roofline",
        str(roofline_file),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "[2/2] matmul float32: passed" in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "bench-operators" and doc["schema_version"] == 1
    data = doc["data"]
    assert [r["name"] for r in data["rows"]] == ["conv3x3", "matmul"] and data["failed"] == []
    assert data["roofline"] == ROOF.to_record().to_dict() and len(data["points"]) == 4
    matmul = data["rows"][1]
    assert matmul["forward"]["ops"] == 2 * 64 * 128 * 64
    assert matmul["forward"]["roofline_share"] is not None
    assert "matmul" in proc.stdout and "fwd+bwd ms" in proc.stdout


def test_cli_reports_a_wrong_operator_with_exit_4(
    tmp_path: Path, roofline_file: Path, wrong_forward: OpCase, capsys: pytest.CaptureFixture[str]
) -> None:
    from aihpc.cli import main

    out = tmp_path / "ops.json"
    code = main(
        [
            "bench",
            "operators",
            "--quick",
            "--ops",
            "relu,wrong_forward",
            "--dtype",
            "float32",
            "--roofline",
            str(roofline_file),
            "--out",
            str(out),
        ]
    )
    assert code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert "failed validation" in err[-1] and "wrong_forward" in err[-1]
    data = json.loads(out.read_text())["data"]
    assert data["failed"] == ["wrong_forward"]
    relu, wrong = data["rows"]
    assert (
        relu["forward"] is not None
        and wrong["forward"] is None
        and wrong["forward_backward"] is None
    )


def test_cli_lists_operators(capsys: pytest.CaptureFixture[str]) -> None:
    from aihpc.cli import main

    assert main(["bench", "operators", "--ops", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == list(CATALOGUE)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ops", "conv3x3,nope"], "unknown operator 'nope'"),
        (["--dtype", "int8"], "dtype must be one of float32, bfloat16, float16, got 'int8'"),
        (["--device", "cuda"], "CUDA is not available"),
        (["--out", "missing/ops.json"], "directory missing does not exist"),
        (
            ["--ops", "conv1x1", "--scale", "1000000000"],
            "does not fit in the memory of cpu",
        ),  # exit 3
    ],
)
def test_cli_bad_input(
    tmp_path: Path,
    roofline_file: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the CLI's entry point in this process (as ``python -m aihpc`` calls it): each case
    fails before measuring, so an interpreter of its own would only add torch's import."""
    from aihpc.cli import main

    if args[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    argv = [
        "bench",
        "operators",
        "--quick",
        "--dtype",
        "float32",
        "--roofline",
        str(roofline_file),
        "--out",
        "ops.json",
        *args,
    ]
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    stderr = capsys.readouterr().err
    assert code == (3 if "does not fit" in message else 2)  # the machine's memory, or the input
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in stderr
    assert not (tmp_path / "ops.json").exists() and not (tmp_path / "missing").exists()


@pytest.mark.slow
def test_cli_measures_the_roofline_and_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = _cli(
        capsys,
        "--quick",
        "--ops",
        "relu",
        "--dtype",
        "float32",
        "--json",
        "--out",
        "ops.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "bench-operators"
    assert (
        doc["data"]["roofline"]["peaks"]["float32"] > 0 and doc["data"]["roofline"]["bandwidth"] > 0
    )
    assert doc == json.loads((tmp_path / "ops.json").read_text())
    assert "measuring the roofline" in proc.stderr
