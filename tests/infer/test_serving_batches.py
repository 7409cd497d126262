"""Serving at fixed batch sizes, on the CPU: the sizes, the padding (answers against the unpadded
model), the warm-up's timings, the split of a latency into queueing and compute, the rule that a
server test kept up with its arrivals, and the duration predicted.  No LoadGen test here."""

from __future__ import annotations

import pytest
import torch

from aihpc.infer.batches import batch_sizes, padded, size_for
from aihpc.infer.latency import percentile, timing_split
from aihpc.infer.loadgen import kept_up
from aihpc.infer.scenarios import (
    OFFLINE_HEADROOM,
    OFFLINE_QUERY_SHARE,
    SINGLE_STREAM_MIN_QUERIES,
    Bounds,
    Calibration,
    predicted_seconds,
    warm_up,
)
from aihpc.infer.source import from_zoo
from aihpc.infer.steps import Classify, Generate
from aihpc.infer.systems import BatchingSystem
from aihpc.tasks.language.decode import generate
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import seed_lm_spec

#: float32 logits of a sample in a padded batch against the sample alone: max |difference| over
#: max |logit| (a batch changes the order of a convolution's sums, not its terms).
PADDING_TOLERANCE = 1e-5


def test_batch_sizes_are_powers_of_two_and_a_batch_takes_the_smallest_that_holds_it() -> None:
    assert batch_sizes(256, 1024) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert batch_sizes(100, 1024) == (1, 2, 4, 8, 16, 32, 64)  # not above --max-batch
    assert batch_sizes(256, 40) == (1, 2, 4, 8, 16, 32)  # nor above the samples
    assert batch_sizes(1, 5) == (1,)
    sizes = batch_sizes(64, 64)
    assert [size_for(sizes, n) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    with pytest.raises(
        ValueError, match="a batch of 65 samples is larger than the largest size 64"
    ):
        size_for(sizes, 65)
    assert padded([7, 3, 5], 8) == [7, 3, 5, 7, 7, 7, 7, 7]


@pytest.fixture(scope="module")
def classify() -> Classify:
    source = from_zoo("digits_cnn", None, 64)
    return Classify(source.model, source.inputs, torch.device("cpu"), "float32", (1, 2, 4, 8, 16))


def test_padding_does_not_change_a_classifier_s_answers(classify: Classify) -> None:
    """Each sample's logits in a padded batch (3 samples in a batch of 4, 5 in 8, 9 in 16) are
    its logits alone, through the model itself, within PADDING_TOLERANCE."""
    worst = 0.0
    for indices in ([5], [0, 9, 4], [1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15, 16, 17, 60]):
        served = classify.logits(indices)
        assert served.shape == (len(indices), 10)
        with torch.inference_mode():
            alone = torch.cat([classify.model(classify.inputs[i : i + 1]) for i in indices])
        worst = max(worst, float((served - alone).abs().max() / alone.abs().max()))
    assert worst <= PADDING_TOLERANCE


def test_padding_does_not_change_a_language_model_s_answers() -> None:
    """A float64 net: each prompt's greedy answer in a padded batch (3 prompts in a batch of 4,
    5 in 8) is the answer to it alone; the first token is reported once per real prompt."""
    spec = seed_lm_spec(
        vocab_size=29, context=12, width=16, layers=2, heads=2, head_dim=8, mlp_hidden=32
    )
    net = LMNet(spec, dtype=torch.float64).eval()
    prompts = torch.randint(29, (10, 5), generator=torch.Generator().manual_seed(4))
    step = Generate(net, prompts, 6, torch.device("cpu"), "float32", (1, 2, 4, 8))
    for indices in ([2], [0, 7, 3], [9, 8, 1, 4, 5]):
        firsts: list[int] = []
        tokens = step(indices, firsts.append)
        assert tokens == [6] * len(indices) and sorted(firsts) == list(range(len(indices)))
        served = step.answers(indices)
        for row, i in zip(served.tolist(), indices, strict=True):
            assert row == generate(net, prompts[i : i + 1], 6)[0].tolist()


def test_a_system_never_forms_a_batch_larger_than_the_sizes_warmed_up(classify: Classify) -> None:
    system = BatchingSystem([classify], max_batch=32, max_wait=0.0)
    with pytest.raises(ValueError, match="batches of up to 32 samples, but the largest size "):
        system.__enter__()
    assert system._threads == []  # no serving thread started


def test_the_warm_up_times_every_size_eagerly_on_the_cpu(classify: Classify) -> None:
    calibration = warm_up([classify])
    assert sorted(calibration.seconds) == [1, 2, 4, 8, 16]
    assert set(classify.timings) == {1, 2, 4, 8, 16}
    for size, timing in calibration.warm_up.items():
        assert timing.served_as == "eager" and timing.graph_s is None
        assert timing.why_eager == "no CUDA graphs on a cpu"
        assert calibration.seconds[size] == timing.eager_s > 0


def test_the_timing_split_adds_up_and_names_the_tail() -> None:
    queueing = [0.001 * (i % 10) for i in range(200)]
    compute = [0.002 + 0.0001 * (i % 7) for i in range(200)]
    latencies = [q + c for q, c in zip(queueing, compute, strict=True)]
    split = timing_split(latencies, queueing, compute)
    assert split.p99_latency_s == percentile(latencies, 99) == sorted(latencies)[197]
    assert split.p99_queueing_s == pytest.approx(0.009)
    tail = split.tail
    assert tail.samples == sum(v >= split.p99_latency_s for v in latencies)
    assert tail.queueing_s is not None and tail.compute_s is not None
    assert tail.queueing_s + tail.compute_s == pytest.approx(tail.latency_s, abs=1e-12)
    assert percentile([], 99) is None and timing_split([], [], []).tail.latency_s is None
    with pytest.raises(ValueError, match="got 2, 1 and 2"):
        timing_split([1.0, 2.0], [1.0], [0.0, 0.0])


def test_a_server_test_kept_up_when_its_completed_rate_is_its_scheduled_one_less_its_drain():
    def results(scheduled: float, completed: float) -> dict:
        return {"scheduled_samples_per_sec": scheduled, "completed_samples_per_sec": completed}

    assert kept_up(results(1000, 990)) is True  # 1 % short: its last samples' latency
    assert kept_up(results(1000, 980)) is True
    assert kept_up(results(1000, 979)) is False  # 2.1 %: its queue grew
    assert kept_up(results(407, 347)) is False  # the README's language model, "VALID" at 407/s
    assert kept_up({"samples_per_second": 5.0}) is None  # not a server test


def test_the_duration_predicted_is_each_scenario_s_tests() -> None:
    calibration = Calibration({1: 0.01, 2: 0.015, 4: 0.02})  # 100, 133 and 200 samples/s
    bound = Bounds(0.1)  # the server's batch: 4 (0.02 s within a third of it)
    everything = ("offline", "single-stream", "server")
    plan = predicted_seconds(calibration, everything, 10.0, (5, bound, 1))
    assert plan == {
        "offline": pytest.approx(OFFLINE_HEADROOM * OFFLINE_QUERY_SHARE * 10.0),
        "single-stream": max(10.0, SINGLE_STREAM_MIN_QUERIES * 0.01),
        # the first at half a single stream's 100/s, 640 queries in 12.8 s; four at 200/s, 10 s
        "server": pytest.approx(640 / 50 + 4 * 10.0),
    }
    # 2-s tests: the first at the floor (640 queries in 4 x 2 s: 80/s), the rest 3.2 s at 200/s
    short = predicted_seconds(calibration, ("single-stream", "server"), 2.0, (5, bound, 1))
    assert short == {
        "single-stream": SINGLE_STREAM_MIN_QUERIES * 0.01,
        "server": pytest.approx(640 / 80 + 4 * 640 / 200),
    }
    # 200 queries/s sustained: below 640 in four 0.2-s tests (800/s), so no server test
    none = predicted_seconds(calibration, ("server",), 0.2, (5, bound, 1))
    assert none == {"server": 0.0}
