"""Weight files: each trial-epoch's model and optimizer state, written where it was trained.

A worker writes the weights its epoch ends with to the run's weight
directory, ``trial<T>-epoch<E>-try<A>.pt`` — a file per attempt, so a lost
attempt that still finishes can never overwrite the one the master
committed — atomically, and returns the file's name and SHA-256 digest (a
:class:`~aihpc.train.task.WeightsRef`).  Whoever reads a file checks the
digest first: a file changed or cut short since is an error that names it,
never weights silently trained from.  The master keeps only the references;
it never reads or writes weights, so its work per epoch does not grow with
the model.  The run directory must therefore be on a file system every
worker sees (on a cluster: the shared scratch or home file system).

A file holds ``{"model": state_dict, "optimizer": state_dict | None}``,
saved with ``torch.save`` on the CPU and loaded with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path
from typing import Any

import torch

from aihpc.errors import StorageError
from aihpc.fileio import atomic_write
from aihpc.train.task import EpochTask, Morph, WeightsRef


def file_name(trial_id: int, epoch: int, attempt: int) -> str:
    return f"trial{trial_id}-epoch{epoch}-try{attempt}.pt"


def save(directory: Path, name: str, model: dict[str, Any], optimizer: dict[str, Any] | None) -> WeightsRef:
    """Write one weight file atomically; returns its reference."""
    buf = io.BytesIO()
    torch.save({"model": model, "optimizer": optimizer}, buf)
    data = buf.getvalue()
    atomic_write(Path(directory) / name, data)
    return WeightsRef(name, hashlib.sha256(data).hexdigest())


def load(directory: Path, ref: WeightsRef) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The (model, optimizer) state dicts of ``ref``; StorageError if missing, unreadable or changed."""
    path = Path(directory) / ref.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StorageError(f"cannot read weight file {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.digest:
        raise StorageError(f"weight file {path} has changed since it was written: SHA-256 {digest[:16]}…, "
                           f"expected {ref.digest[:16]}…")
    content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return content["model"], content["optimizer"]


def starting_state(task: EpochTask) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The (model, optimizer) state ``task`` starts from; (None, None) for a fresh initialisation."""
    if task.start is not None:
        return load(Path(task.weights_dir), task.start)
    if task.morph is not None:
        return morphed_state(task.morph, task.arch, Path(task.weights_dir)), None
    return None, None


def morphed_state(morph: Morph, arch: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A child's starting weights: its parent's, carried through the morph recipe.

    The replayed architecture must be the child's (``arch``): a mismatch
    means master and worker disagree on the morphisms and is an error.
    """
    from aihpc.nas.build import SpecNet
    from aihpc.nas.morphism import random_plan
    from aihpc.nas.spec import ArchSpec

    spec = ArchSpec.from_dict(morph.parent_arch)
    if morph.parent_weights is not None:
        state = load(directory, morph.parent_weights)[0]
    else:
        torch.manual_seed(morph.parent_seed)
        state = SpecNet(spec).state_dict()
    rng = random.Random(morph.seed)
    for _ in range(morph.steps):
        spec, apply, _ = random_plan(spec, rng, morph.max_params)
        state = apply(state)
    child = ArchSpec.from_dict(arch)
    if spec.content_hash() != child.content_hash():
        raise ValueError(f"the morph recipe gives architecture {spec.content_hash()[:12]}, "
                         f"not the child's {child.content_hash()[:12]}")
    return state
