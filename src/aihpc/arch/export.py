"""Export a PyTorch image or sequence model to ONNX and validate the file.

:func:`export_onnx` writes one self-contained ``.onnx`` file whose input is
``"input"`` of shape ``(batch, C, H, W)`` float32 and whose output is
``"logits"``; the batch dimension is symbolic (``"batch"``), so the file also
accepts batch sizes other than the one used for tracing.  A tokens model of
the zoo (``vocab`` given) takes ``"input"`` of shape ``(batch, T)`` int64
token ids and returns ``"logits"`` ``(rows, vocab)`` with ``rows = batch x T``
(symbolic ``"rows"``); ``T`` is fixed by the trace.

Exporter choice: torch 2.13 defaults to the ``torch.export``-based exporter
(``dynamo=True``).  For the plain CNNs of this project the TorchScript
exporter produces equivalent graphs several times faster (the figures:
docs/measurements/2026-11-29-figures-from-code-comments.md) and honours every opset from
7 to 20 exactly, so it is the default here; ``dynamo=True`` selects the new
exporter (opsets 18 and up).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from aihpc.base.checks import integer, is_integer
from aihpc.base.errors import ConfigError, ModelError, StorageError
from aihpc.base.fileio import atomic_path

__all__ = [
    "Exported",
    "export_model",
    "export_onnx",
    "onnx_opset",
    "parse_input_shape",
    "parse_sequence_length",
]

MIN_OPSET = 7

# Messages the exporters emit on every call that say nothing about this model.
_NOISE = (
    (DeprecationWarning, r"You are using the legacy TorchScript-based ONNX export"),
    (DeprecationWarning, r"The feature will be removed"),
    (UserWarning, r"Constant folding - Only steps=1 can be constant folded"),
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # nn.LSTM with zero initial states: the exported file runs at other batch
    # sizes too (tests/models/test_sequence_models.py runs batch 3 on a file
    # traced at batch 2), so this warning does not apply to the zoo's LSTM.
    (UserWarning, r"Exporting a model to ONNX with a batch_size other than 1"),
)


def parse_input_shape(text: str) -> tuple[int, int, int]:
    """Parse ``"CxHxW"`` (e.g. ``"3x224x224"``) into ``(C, H, W)``.

    Raises :class:`ConfigError` naming ``text`` unless it is exactly three
    positive integers separated by ``x``.
    """
    parts = text.strip().lower().split("x")
    if len(parts) != 3 or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise ConfigError(f"input shape must look like CxHxW, e.g. 3x224x224, got {text!r}")
    c, h, w = (int(p) for p in parts)
    if min(c, h, w) < 1:
        raise ConfigError(f"input shape dimensions must be >= 1, got {text!r}")
    return c, h, w


def parse_sequence_length(text: str) -> tuple[int]:
    """Parse ``"T"`` (e.g. ``"35"``), a tokens model's sequence length, into ``(T,)``.

    Raises :class:`ConfigError` naming ``text`` unless it is one integer >= 1.
    """
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise ConfigError(
            f"input shape of a tokens model must be its sequence length T >= 1, "
            f"e.g. 35, got {text!r}"
        )
    return (int(text),)


def onnx_opset(path: str | os.PathLike[str]) -> int:
    """The default-domain (``ai.onnx``) opset version recorded in an ONNX file."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise ModelError(f"ONNX file {path} imports no ai.onnx opset")


def _check_arguments(
    input_shape: tuple[int, ...], batch: int, opset: int | None, vocab: int | None
) -> None:
    rank, what = (3, "three integers (C, H, W)") if vocab is None else (1, "one integer (T,)")
    shape_ok = (
        isinstance(input_shape, tuple)
        and len(input_shape) == rank
        and all(is_integer(d, 1) for d in input_shape)
    )
    if not shape_ok:
        raise ConfigError(f"input_shape must be {what} >= 1, got {input_shape!r}")
    if vocab is not None:
        integer("vocab", vocab)
    integer("batch", batch)
    if opset is not None:
        integer("opset", opset, MIN_OPSET)


def _prepare_target(path: Path) -> None:
    """Make sure ``path``'s directory exists (created if needed) and that
    ``path`` itself is not a directory."""
    if path.is_dir():
        raise ConfigError(f"output path {path} is a directory, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ConfigError(
            f"cannot create output directory {path.parent}: "
            "a component of it is a file, not a directory"
        ) from exc
    except OSError as exc:
        raise StorageError(
            f"cannot create output directory {path.parent}: {exc.strerror or exc}"
        ) from exc


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporters' fixed deprecation chatter and log lines."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category, pattern in _NOISE:
                warnings.filterwarnings("ignore", message=pattern, category=category)
            # nn.LSTM's own input-size checks read traced sizes; the shapes are fixed by the trace.
            warnings.filterwarnings(
                "ignore", category=torch.jit.TracerWarning, module=r"torch\.nn\.modules\.rnn"
            )
            yield
    finally:
        logger.setLevel(level)


def _model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for buffer in model.buffers():
        return buffer.device
    return torch.device("cpu")


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike[str],
    input_shape: tuple[int, ...],
    batch: int = 1,
    opset: int | None = None,
    *,
    dynamo: bool = False,
    vocab: int | None = None,
) -> Path:
    """Export ``model`` to the ONNX file ``path`` and validate it.

    ``input_shape`` is ``(C, H, W)`` of one float32 image; the model is traced
    with a random batch of ``batch`` images in eval mode (its training mode is
    restored afterwards), and the file's batch dimension is left symbolic.
    With ``vocab`` (a tokens model's vocabulary size) ``input_shape`` is
    ``(T,)`` and the model is traced on random int64 token ids ``(batch, T)``.
    ``opset`` is the ONNX opset (``None``: the exporter's default; 7-20 with
    the default TorchScript exporter, 18 and up with ``dynamo=True``).

    The file is written to a temporary name next to ``path``, checked with
    ``onnx.checker.check_model(full_check=True)`` (strict shape inference),
    and only then moved to ``path``; on any failure ``path`` is untouched.
    Returns ``path`` as a :class:`~pathlib.Path`.

    Raises :class:`ConfigError` for bad arguments, :class:`StorageError` for
    an unwritable path and :class:`ModelError` when the model rejects
    ``input_shape`` or its export fails validation.
    """
    _check_arguments(input_shape, batch, opset, vocab)
    target = Path(path)
    _prepare_target(target)

    was_training = model.training
    model.eval()
    try:
        device = _model_device(model)
        example = (
            torch.randn(batch, *input_shape, device=device)
            if vocab is None
            else torch.randint(vocab, (batch, *input_shape), device=device)
        )
        try:
            with torch.no_grad():
                model(example)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"model does not accept input shape {'x'.join(map(str, input_shape))}: {first}"
            ) from exc

        with atomic_path(target) as tmp:
            tmp.open("wb").close()  # fails early, with a clear OSError, if unwritable
            _write_onnx(model, example, tmp, opset, dynamo, "batch" if vocab is None else "rows")
            _validate_onnx(tmp, opset)
    finally:
        model.train(was_training)
    return target


def _write_onnx(
    model: nn.Module,
    example: torch.Tensor,
    file: Path,
    opset: int | None,
    dynamo: bool,
    rows: str = "batch",
) -> None:
    """Trace ``model`` on ``example`` into ``file``, its batch dimension symbolic
    (the logits' first dimension named ``rows``)."""
    with _quiet_exporter():
        if dynamo:
            torch.onnx.export(
                model,
                (example,),
                str(file),
                dynamo=True,
                verbose=False,
                input_names=["input"],
                output_names=["logits"],
                dynamic_shapes=({0: torch.export.Dim("batch")},),
                opset_version=opset,
                external_data=False,
            )
        else:
            torch.onnx.export(
                model,
                (example,),
                str(file),
                dynamo=False,
                input_names=["input"],
                output_names=["logits"],
                dynamic_axes={"input": {0: "batch"}, "logits": {0: rows}},
                opset_version=opset,
            )


def _validate_onnx(file: Path, opset: int | None) -> None:
    """ModelError unless ``file`` passes the ONNX checker; ConfigError if it is not in ``opset``."""
    import onnx

    try:
        onnx.checker.check_model(str(file), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ModelError(f"exported ONNX model failed validation: {exc}") from exc
    written = onnx_opset(file)
    if opset is not None and written != opset:
        raise ConfigError(
            f"opset {opset} is not supported by this exporter (it wrote opset {written})"
        )


@dataclass(frozen=True)
class Exported:
    """An ONNX file :func:`export_model` wrote: where, its opset, its input and what it holds."""

    path: Path
    opset: int
    input_shape: tuple[int, ...]  # one sample: (C, H, W), or (T,) for a tokens model
    source: str  # the zoo model's name or the spec file

    def line(self) -> str:
        size_mb = self.path.stat().st_size / 1e6
        shape = "x".join(map(str, self.input_shape))
        return (
            f"{self.path}  {size_mb:.2f} MB  opset {self.opset}  input Nx{shape}  ({self.source})"
        )


def export_model(
    output: str | os.PathLike[str],
    *,
    model: str | None = None,
    spec: str | os.PathLike[str] | None = None,
    input_text: str | None = None,
    num_classes: int | None = None,
    batch: int = 1,
    opset: int | None = None,
    dynamo: bool = False,
) -> Exported:
    """Export the zoo ``model`` or the architecture ``spec`` to ``output`` (:func:`export_onnx`).

    ``input_text``: one sample's shape, ``CxHxW`` (a tokens model: its sequence length T),
    default the model's or the spec's; ``num_classes`` applies to a zoo model only.
    """
    if spec is not None:
        net, shape, vocab = _spec_model(spec, input_text, num_classes)
        source = str(spec)
        # a language model's RMSNorm is aten::rms_norm, which only the torch.export-based
        # exporter writes (as ONNX's RMSNormalization)
        dynamo = dynamo or vocab is not None
    elif model is not None:
        net, shape, vocab = _zoo_model(model, input_text, num_classes)
        source = model
    else:
        raise ConfigError("give a zoo model or an architecture spec to export, got neither")
    path = export_onnx(net, output, shape, batch=batch, opset=opset, dynamo=dynamo, vocab=vocab)
    return Exported(path, onnx_opset(path), shape, source)


def _spec_model(
    spec_file: str | os.PathLike[str], input_text: str | None, num_classes: int | None
) -> tuple[nn.Module, tuple[int, ...], int | None]:
    """The network of a spec file, its input shape and, where it reads token ids, their
    vocabulary (its task's :meth:`~aihpc.tasks.base.Task.model_input`)."""
    from aihpc.arch.spec_file import load_spec

    if num_classes is not None:
        raise ConfigError("--num-classes applies to --model only; a spec fixes its own classes")
    task, spec = load_spec(Path(spec_file))
    shape, vocab = task.model_input(spec)
    asked = None
    if input_text is not None:
        asked = parse_sequence_length(input_text) if vocab else parse_input_shape(input_text)
    if asked is not None and asked != shape:
        wanted = "x".join(map(str, shape))
        raise ConfigError(f"--input {input_text} does not match the spec's input shape {wanted}")
    return task.model(spec), shape, vocab


def _zoo_model(
    name: str, input_text: str | None, num_classes: int | None
) -> tuple[nn.Module, tuple[int, ...], int | None]:
    """The zoo model, one sample's shape, and a tokens model's vocabulary (None: images)."""
    from aihpc import models

    meta = models.info(name)
    if meta.input_kind == "tokens":
        shape: tuple[int, ...] = (
            parse_sequence_length(input_text) if input_text is not None else meta.input_shape
        )
        vocab = meta.num_classes if num_classes is None else num_classes
        return models.create(name, num_classes=num_classes), shape, vocab
    shape = parse_input_shape(input_text) if input_text is not None else meta.input_shape
    return models.create(name, num_classes=num_classes, in_channels=shape[0]), shape, None
