"""Quality is part of an inference result's validity: the served model against its float32 self.

MLPerf Inference's rule: a result is valid only if the model, in the precision
it is served in, keeps at least 99 % of its float32 reference's quality on the
validation set.  :func:`check_quality` measures both on the same samples:

* images with labels: accuracy; valid if served >= 0.99 x float32;
* a language model's windows: the loss in nats per token (lower is better);
  valid if served <= float32 / 0.99;
* inputs without labels (a zoo model on synthetic inputs): the share of
  samples whose top prediction is float32's; valid at 0.99 or more.

The float32 reference runs on the same device with autocast off; the served
run under the serving dtype's autocast (``float32``: none).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from aihpc.records.inference import InferQuality

#: MLPerf Inference's share of the float32 quality a served model must keep.
KEEP = 0.99


@dataclass(frozen=True)
class QualityCheck:
    """The served model's quality against float32's: ``measure`` ("accuracy", "loss" or
    "agreement"), both values, the ratio kept, and whether it is valid (the reason if not)."""

    measure: str
    served: float
    reference: float
    kept: float
    samples: int
    dtype: str
    valid: bool
    reason: str | None

    def record(self) -> InferQuality:
        """As infer.json's ``quality`` records it."""
        return InferQuality(
            measure=self.measure,
            served=self.served,
            reference=self.reference,
            kept=self.kept,
            dtype=self.dtype,
            samples=self.samples,
            valid=self.valid,
            reason=self.reason,
        )


def autocast_for(device: torch.device, dtype: str) -> Any:
    """The autocast context of serving in ``dtype`` on ``device`` (``float32``: none), its
    cache of cast weights off: a CUDA graph captured under it must not hold casts the cache
    frees when the context ends (the weights are cast in each call instead)."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, dtype), cache_enabled=False)


@torch.no_grad()
def outputs(
    model: torch.nn.Module, inputs: torch.Tensor, device: torch.device, dtype: str, batch: int
) -> torch.Tensor:
    """The model's logits for every input, in float32 on the host, run in ``dtype``."""
    parts = []
    for i in range(0, inputs.shape[0], batch):
        x = inputs[i : i + batch].to(device)
        with autocast_for(device, dtype):
            parts.append(model(x).float().cpu())
    return torch.cat(parts)


def check_quality(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor | None,
    device: torch.device,
    dtype: str,
    batch: int = 64,
) -> QualityCheck:
    """The served model's quality in ``dtype`` against float32 (the module docstring)."""
    served = outputs(model, inputs, device, dtype, batch)
    reference = served if dtype == "float32" else outputs(model, inputs, device, "float32", batch)
    n = int(inputs.shape[0])
    if targets is None:
        agreement = float((served.argmax(-1) == reference.argmax(-1)).float().mean())
        return _check("agreement", agreement, 1.0, agreement, n, dtype)
    if served.dim() == 3:  # a language model's logits per position: the loss per token
        loss_s = float(F.cross_entropy(served.flatten(0, 1), targets.flatten()))
        loss_r = float(F.cross_entropy(reference.flatten(0, 1), targets.flatten()))
        return _check("loss", loss_s, loss_r, loss_r / loss_s if loss_s > 0 else 1.0, n, dtype)
    acc_s = float((served.argmax(1) == targets).float().mean())
    acc_r = float((reference.argmax(1) == targets).float().mean())
    return _check("accuracy", acc_s, acc_r, acc_s / acc_r if acc_r > 0 else 1.0, n, dtype)


def _check(
    measure: str, served: float, reference: float, kept: float, n: int, dtype: str
) -> QualityCheck:
    valid = kept >= KEEP
    reason = None
    if not valid:
        reason = (
            f"the {measure} served in {dtype} ({served:.4f}) keeps {100 * kept:.2f} % of "
            f"float32's ({reference:.4f}), below MLPerf's {100 * KEEP:.0f} %"
        )
    return QualityCheck(measure, served, reference, kept, n, dtype, valid, reason)
