"""The language task (aihpc.tasks.language.task): its counting against FlopCounterMode and PaLM's
model-FLOPs convention, its windows of tokens, and a trial-epoch trained and grown through the
trainer."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from aihpc.base.errors import ConfigError, DataError
from aihpc.records.messages import DataRef, EpochTask, Morph
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import read_config, task_of
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.quality import Loss
from aihpc.tasks.language.spec import seed_lm_spec
from aihpc.tasks.language.task import model_flops_per_token
from aihpc.tasks.language.windows import TokenWindows
from aihpc.train.worker import run_epoch

LM = task_of("lm")
SPEC = seed_lm_spec(
    vocab_size=65, context=32, width=32, layers=2, heads=2, head_dim=16, mlp_hidden=64
)


def test_the_count_of_a_window_agrees_with_flop_counter_mode_on_the_matrix_products() -> None:
    """FlopCounterMode counts matrix products only, and on the CPU not the attention (its
    flash kernel is not in its table): the linear layers' products, forward and backward, must
    be aihpc's mm count exactly."""
    torch.manual_seed(0)
    model = LMNet(SPEC)
    tokens = torch.randint(0, SPEC.vocab_size, (3, SPEC.context))
    with FlopCounterMode(display=False) as counter:
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    theirs = counter.get_flop_counts()["Global"]
    from aihpc.counting import count_ops

    meta = torch.device("meta")
    with meta:
        net = LMNet(SPEC)
    ours = count_ops(
        _flat(net),
        (torch.zeros((3, SPEC.context), dtype=torch.long, device=meta),),
        train=True,
        target=torch.zeros(3 * SPEC.context, dtype=torch.long, device=meta),
    )
    mm = ours.by_operator["mm"]
    assert mm["forward"] + mm["backward"] == theirs[torch.ops.aten.mm]
    # the attention's two products, counted over the full T x T scores as FlopCounterMode counts
    # them on a GPU's kernels: 2 x (2 B H T T Q) forward, twice that backward
    bmm = ours.by_operator["bmm"]
    per_layer = 2 * (2 * 3 * 2 * SPEC.context**2 * 16)
    assert bmm["forward"] == SPEC.layers * per_layer and bmm["backward"] == 2 * bmm["forward"]


def _flat(net: torch.nn.Module) -> torch.nn.Module:
    from aihpc.tasks.language.net import FlatLogits

    return FlatLogits(net)


def test_the_count_per_token_beside_palms_model_flops() -> None:
    train, evaluate = LM.count_per_sample(SPEC, batch=4, dropout=0.0)
    per_token = train / SPEC.context
    n = SPEC.num_params() - SPEC.vocab_size * SPEC.width  # the embedding is a lookup
    palm = 6 * n + 12 * SPEC.layers * 2 * 16 * SPEC.context
    assert model_flops_per_token(SPEC) == palm
    # aihpc counts the same products and, besides, softmax, norms, GELU, rotary and the loss
    assert palm < per_token < 1.15 * palm
    assert evaluate / SPEC.context == pytest.approx(per_token / 3, rel=0.1)  # forward ~ 1/3
    assert LM.model_flops(SPEC, 10) == 10 * SPEC.context * palm
    assert LM.recount_per_sample(SPEC, 4, 0.0) == (train, evaluate)


def test_windows_of_documents_start_with_bos_and_of_a_stream_overlap_by_one_token() -> None:
    docs = np.arange(12, dtype=np.uint16)  # three documents of 4 tokens
    w = TokenWindows(docs, 5, doc_length=4, bos=99)
    assert len(w) == 3 and w.predicted_tokens == 12
    assert w.raw(np.array([1, 2])).tolist() == [[99, 4, 5, 6, 7], [99, 8, 9, 10, 11]]
    stream = TokenWindows(np.arange(10, dtype=np.uint32), 4, doc_length=None, bos=None)
    assert len(stream) == 3 and stream.raw(np.array([0, 2])).tolist() == [
        [0, 1, 2, 3],
        [6, 7, 8, 9],
    ]
    assert stream.label(np.array([0, 1])).tolist() == [0, 0]
    with pytest.raises(DataError, match="hold no window of 20 tokens"):
        TokenWindows(np.arange(10), 20, doc_length=None, bos=None)


def test_the_loss_quality_scores_in_e_folds_of_the_reducible_loss() -> None:
    q = Loss(unigram=4.0, max_loss=2.5, floor=2.0, resolution=0.001)
    assert q.goodness(2.1) > q.goodness(2.2) and not q.higher_is_better
    assert q.regulated(10.0, 4.0) == 0.0  # the unigram loss: nothing gained
    assert q.regulated(10.0, 3.0) == pytest.approx(10.0 * np.log(2.0))  # half the gap closed
    assert q.regulated(10.0, 2.0) == pytest.approx(
        10.0 * np.log(2.0 / 0.001)
    )  # held at the resolution
    assert q.invalid_reason(2.4) is None and "above the maximum 2.5000" in (
        q.invalid_reason(2.6) or ""
    )
    fields = q.score_fields(2.25)
    assert fields["gap_to_floor"] == pytest.approx(0.25) and fields["best_accuracy"] is None
    text = Loss(unigram=5.0, max_loss=4.0, floor=None, resolution=0.01, bytes_per_token=1.0)
    assert text.score_fields(2.0)["bits_per_byte"] == pytest.approx(2.0 / np.log(2))


def test_the_task_rejects_what_it_cannot_do() -> None:
    with pytest.raises(ConfigError, match="screen scores CNN children"):
        LM.default_workload(read_config(dict(task="lm", screen=4)), "cpu")
    with pytest.raises(ConfigError, match="dataset for the language task must be one of"):
        digits = LM.default_workload(read_config(dict(task="lm", dataset="digits")), "cpu")
        LM.inspect_data(digits, "cpu")


def _task(tmp_path, **changes) -> EpochTask:
    options = (
        ("doc_length", 32),
        ("epoch_tokens", 4096),
        ("train_tokens", 8192),
        ("val_tokens", 2048),
        ("vocab_size", 64),
    )
    hp = Hyperparameters(lr=3e-3, batch_size=8, weight_decay=0.01, optimizer="adamw", warmup=0.1)
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=SPEC.to_dict(),
        hparams=hp,
        data=DataRef("synthetic", options=options, task="lm"),
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(tmp_path),
    )
    return EpochTask(**{**base, **changes})


def test_a_trial_epoch_trains_on_tokens_and_counts_its_windows(tmp_path) -> None:
    r = run_epoch(LM, _task(tmp_path))
    assert r.status == "ok", r.reason
    m = r.metrics
    assert m["train_samples"] == 4096 // 32  # epoch_tokens / context windows of one document each
    assert m["val_samples"] == 2048 // 32
    assert np.log(2) < m["val_loss"] < np.log(65) + 0.5 and 0 <= m["val_accuracy"] <= 1
    train, evaluate = LM.count_per_sample(SPEC, 8, 0.0)
    assert r.ops_train == round(train * m["train_samples"]) and r.ops_eval == round(
        evaluate * m["val_samples"]
    )
    assert m["model_flops"] == LM.model_flops(SPEC, m["train_samples"])


def test_a_child_trains_on_from_its_parents_weights(tmp_path) -> None:
    parent = run_epoch(LM, _task(tmp_path))
    child_spec, _, how = random_lm_plan(SPEC, random.Random(5))
    morph = Morph(SPEC.to_dict(), parent.weights, parent_seed=3, seed=5, steps=1, max_params=None)
    child = run_epoch(LM, _task(tmp_path, trial_id=1, arch=child_spec.to_dict(), morph=morph))
    fresh = run_epoch(LM, _task(tmp_path, trial_id=2, arch=child_spec.to_dict()))
    assert child.status == "ok" and fresh.status == "ok", (child.reason, fresh.reason)
    # the child starts where its parent ended: after one more epoch it is ahead of the same
    # architecture trained from scratch for one epoch
    assert child.metrics["val_loss"] < fresh.metrics["val_loss"], how
