"""The default seeds are smaller than compute-optimal for the default budget, so that growing is
needed: their sizes and ``min_train_ops`` as the tasks' docstrings state them, and the rules
behind ``min_train_ops``."""

from __future__ import annotations

import re

import pytest

from aihpc.base.errors import ConfigError
from aihpc.tasks import read_config, task_of
from aihpc.tasks.image.options import ImageOptions
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.task import SEEDS as IMAGE_SEEDS
from aihpc.tasks.image.task import WORTH_EPOCHS, seed_network
from aihpc.tasks.language.options import LanguageOptions
from aihpc.tasks.language.task import DEFAULT_CONTEXT, TOKENS_PER_PARAM
from aihpc.tasks.language.task import SEEDS as LM_SEEDS

IMAGE, LM = task_of("image"), task_of("lm")


@pytest.mark.parametrize(
    ("device", "info", "params", "min_ops"),
    [
        # the default synthetic images: 9,600 training images of 3x16x16, 50 classes
        ("cpu", {"input_shape": [3, 16, 16], "num_classes": 50, "num_train": 9600}, 70_106, 6.1e11),
        # 40,000 of 3x128x128, 100 classes: ResNet-50 as it is
        (
            "cuda",
            {"input_shape": [3, 128, 128], "num_classes": 100, "num_train": 40000},
            23_712_932,
            1.28e15,
        ),
    ],
)
def test_the_image_seeds_as_stated(device, info, params, min_ops):
    info = {**info, "seed_network": seed_network(tuple(info["input_shape"]), device)}
    spec = IMAGE.seed_arch(info)
    assert spec.num_params() == params
    assert IMAGE.min_train_ops(spec, info) == pytest.approx(min_ops, rel=0.01)
    train, _ = IMAGE.count_per_sample(spec, 1, 0.0)  # the worker's own counter
    assert IMAGE.min_train_ops(spec, info) == pytest.approx(
        WORTH_EPOCHS * info["num_train"] * train
    )


def test_the_image_seed_width_applies_where_the_size_takes_one():
    assert IMAGE_SEEDS == {"cpu": {"cifar": 8}, "cuda": {}}
    assert seed_network((3, 16, 16), "cpu") == {"width": 8}
    assert seed_network((1, 8, 8), "cpu") == {}  # digits: far below compute-optimal as it is
    assert seed_network((3, 224, 224), "cpu") == {}  # ResNet-50 is fixed
    assert seed_network((3, 32, 32), "cuda") == {}
    # a run recorded before the field: the seed as it was
    old = {"input_shape": [3, 16, 16], "num_classes": 50}
    assert IMAGE.seed_arch(old) == seed_spec((3, 16, 16), 50)


def test_a_run_sets_the_image_seeds_width_where_its_size_takes_one():
    assert seed_network((3, 16, 16), "cpu", 12) == {"width": 12}
    assert seed_network((3, 32, 32), "cuda", 24) == {"width": 24}
    info = {"input_shape": [3, 16, 16], "num_classes": 50, "seed_network": {"width": 16}}
    assert IMAGE.seed_arch(info) == seed_spec((3, 16, 16), 50, width=16)
    with pytest.raises(
        ConfigError, match=r"seed_width does not apply to inputs of 224x224 .*got 8"
    ):
        seed_network((3, 224, 224), "cpu", 8)


@pytest.mark.parametrize("width", [0, -3, 2.5, True, "8"])
def test_a_seed_width_that_is_not_a_whole_number_from_1_is_refused(width):
    with pytest.raises(ConfigError, match=f"seed_width must be a whole number >= 1, got {width!r}"):
        ImageOptions(seed_width=width)


@pytest.mark.parametrize(
    ("device", "params", "min_ops"), [("cpu", 80_208, 9.25e11), ("cuda", 201_886_720, 5.72e18)]
)
def test_the_language_seeds_as_stated(device, params, min_ops):
    info = {"vocab_size": 257, "context": DEFAULT_CONTEXT[device], "seed_network": LM_SEEDS[device]}
    spec = LM.seed_arch(info)
    assert spec.num_params() == params
    assert LM.min_train_ops(spec, info) == pytest.approx(min_ops, rel=0.01)
    per_token = LM.count_per_sample(spec, 1, 0.0)[0] / spec.context
    assert LM.min_train_ops(spec, info) == pytest.approx(TOKENS_PER_PARAM * params * per_token)


def test_a_run_sets_the_language_seeds_sizes_and_keeps_the_rest_of_the_devices():
    small = {"doc_length": 32, "train_tokens": 8192, "val_tokens": 2048, "vocab_size": 64}
    config = read_config(dict(task="lm", seed_network={"width": 64}, data_options=small))
    info = LM.inspect_data(LM.default_workload(config, "cpu"), "cpu")
    assert info["seed_network"] == {**LM_SEEDS["cpu"], "width": 64}
    assert LM.seed_arch(info).width == 64


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (
            {"depth": 3},
            "seed_network's keys are width, layers, heads, head_dim, mlp_hidden, got 'depth'",
        ),
        ({"layers": 0}, "seed_network.layers"),
        ([48], "seed_network must be a table, got [48]"),
    ],
)
def test_a_language_seed_setting_it_cannot_use_is_refused(seed, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        LanguageOptions(seed_network=seed)
