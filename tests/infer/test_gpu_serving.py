"""Serving on a GPU: each batch size captured as a CUDA graph answers as the eager model does, a
language model's fixed-shape decoding replays as graphs, and ``aihpc infer`` on a GPU serves
only warmed-up sizes within the time it predicts.  Every test is marked ``gpu`` and skipped,
with the reason, where CUDA is not available."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aihpc.infer.batches import Replay
from aihpc.infer.source import from_zoo
from aihpc.infer.steps import Classify, Generate
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import seed_lm_spec
from fixture_run import aihpc

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; torch sees none"),
]

#: bfloat16 logits of a graph's replay against the eager call's: max |difference| over max |logit|
#: (the same kernels on the same inputs; a bfloat16 logit holds about 3 significant digits).
GRAPH_TOLERANCE = 1e-2
#: float32 logits of a sample in a padded batch against the sample alone on a GPU: convolutions
#: run in TF32 there (10 bits of mantissa), and another batch size may pick another algorithm.
PADDING_TOLERANCE = 5e-3
SIZES = (1, 2, 4, 8, 16)


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    torch.backends.cudnn.benchmark = True  # as aihpc infer serves on a GPU
    return torch.device("cuda", 0)


def _classify(cuda: torch.device, dtype: str) -> Classify:
    source = from_zoo("resnet20", None, 64)
    model = source.model.to(cuda).to(memory_format=torch.channels_last)
    return Classify(model, source.inputs, cuda, dtype, SIZES, channels_last=True)


def test_each_size_is_captured_and_its_graph_answers_as_the_eager_model(cuda) -> None:
    step = _classify(cuda, "bfloat16")
    eager = dict(step.calls)
    timings = step.prepare()
    assert sorted(timings) == list(SIZES)
    for timing in timings.values():
        assert timing.graph_s is not None and timing.graph_s > 0, timing.why_eager
        assert timing.graph == (timing.graph_s < timing.eager_s)
        assert (timing.why_eager is None) == timing.graph
    pool = torch.cuda.graph_pool_handle()
    worst = 0.0
    for size in SIZES:
        step.buffer[:size].copy_(step.inputs[:size])
        (call,) = eager[size]
        want = call().float().clone()
        got = Replay(call, cuda, pool)().float()
        worst = max(worst, float((got - want).abs().max() / want.abs().max()))
    assert worst <= GRAPH_TOLERANCE


def test_padding_does_not_change_answers_on_a_gpu(cuda) -> None:
    step = _classify(cuda, "float32")
    step.prepare()
    for indices in ([5], [0, 9, 4], [1, 2, 3, 4, 5], list(range(10, 19))):
        served = step.logits(indices).float()
        with torch.inference_mode():
            alone = torch.cat([step.model(step.inputs[i : i + 1]) for i in indices]).float()
        assert float((served - alone).abs().max() / alone.abs().max()) <= PADDING_TOLERANCE


def _lm(cuda: torch.device) -> LMNet:
    """A small net, its matrices normal with 1/sqrt(fan-in) (GPT-2's 0.02 leaves the top logits
    of an untrained net so close that rounding could swap them)."""
    spec = seed_lm_spec(
        vocab_size=97, context=32, width=64, layers=2, heads=4, head_dim=16, mlp_hidden=128
    )
    net = LMNet(spec)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if not name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return net.to(cuda).eval()


def test_a_language_model_s_decoding_replays_as_graphs(cuda) -> None:
    """The prefill and the fixed-shape decode step of each size captured (in bfloat16, as served,
    and in float32): in float32 the graphs' answers are the eager decoder's, token for token,
    and each prompt's answer in a padded batch is its answer alone."""
    prompts = torch.randint(97, (24, 12), generator=torch.Generator().manual_seed(1))
    served = Generate(_lm(cuda), prompts, 8, cuda, "bfloat16", (1, 2, 4, 8))
    assert all(t.graph_s is not None for t in served.prepare().values())
    step = Generate(_lm(cuda), prompts, 8, cuda, "float32", (1, 2, 4, 8))
    alone = [step.answers([i]).cpu() for i in range(8)]
    eager = {size: step.answers(list(range(size))).cpu() for size in (1, 2, 4, 8)}
    timings = step.prepare()
    assert all(t.graph_s is not None for t in timings.values()), timings
    for size, calls in step.calls.items():
        if not timings[size].graph:  # eager was faster: its graphs are made here to be checked
            step.calls[size] = tuple(Replay(call, cuda, None) for call in calls)
        got = step.answers(list(range(size))).cpu()
        assert torch.equal(got, eager[size]) and torch.equal(got, torch.cat(alone[:size]))
    assert torch.equal(step.answers([3, 1, 4]).cpu(), torch.cat([alone[3], alone[1], alone[4]]))
    firsts: list[int] = []
    assert step([3, 1, 4], firsts.append) == [8, 8, 8] and sorted(firsts) == [0, 1, 2]


@pytest.mark.slow
def test_infer_on_a_gpu_serves_warmed_up_sizes_within_its_predicted_time(tmp_path: Path) -> None:
    out = tmp_path / "r20"
    args = "--model resnet20 --device cuda --samples 256 --seconds 2 --server-steps 3"
    proc = aihpc("infer", *args.split(), "--peak-seconds", "0.5", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "infer.json").read_text())["data"]
    assert data["dtype"] == "bfloat16" and data["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert all(t["graph_s"] is not None for t in data["warm_up"].values()), data["warm_up"]
    for s in data["scenarios"].values():
        for test in s["tests"]:
            assert set(map(int, test["batch_sizes"])) <= set(data["batch_sizes"])
    d = data["duration"]
    assert d["after_warm_up_actual_s"] <= 1.5 * d["after_warm_up_predicted_s"] + 10, d
