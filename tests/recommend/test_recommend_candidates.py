"""Candidate sets, candidates files and the fit check."""

import json

import pytest

from aihpc.base.errors import ConfigError, SpecError
from aihpc.recommend.archs import matched_specs, wide_range_specs
from aihpc.recommend.candidates import resolve
from aihpc.tasks.image.seeds import seed_spec

SHAPE, K = (1, 8, 8), 10


def test_small_set_spans_three_orders_of_magnitude_and_matched_set_one_size():
    small = [s.num_params() for _, s in wide_range_specs(SHAPE, K)]
    matched = [s.num_params() for _, s in matched_specs(SHAPE, K, target=12_000)]
    assert len(small) == len(matched) == 10
    assert max(small) / min(small) > 1000
    assert all(abs(n - 12_000) / 12_000 < 0.05 for n in matched)
    assert len({s.content_hash() for _, s in matched_specs(SHAPE, K)}) == 10


def test_builtin_sets_resolve_and_build_at_the_task_shape():
    import torch

    for kind in ("small", "matched", "zoo"):
        cands = resolve(kind, SHAPE, K)
        assert cands and len({c.name for c in cands}) == len(cands)
        assert cands[0].build(0)(torch.zeros(2, *SHAPE)).shape == (2, K)


def test_a_file_mixes_zoo_spec_and_children(tmp_path):
    seed_spec(SHAPE, K).save(tmp_path / "net.json")
    (tmp_path / "c.json").write_text(
        json.dumps(
            {
                "candidates": [
                    {"zoo": "digits_cnn"},
                    {"spec": "net.json", "name": "mine"},
                    {"children_of": "net.json", "count": 3, "seed": 1},
                ]
            }
        )
    )
    cands = resolve(str(tmp_path / "c.json"), SHAPE, K)
    assert [c.name for c in cands] == ["digits_cnn", "mine", "child0", "child1", "child2"]
    assert [c.source for c in cands] == ["zoo", "spec", "child", "child", "child"]


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "candidates file"),
        ("[]", "non-empty list"),
        ('[{"zoo": "digits_cnn", "spec": "x.json"}]', "exactly one of"),
        ('[{"zoo": "digits_cnn", "colour": 1}]', "unknown key"),
        ('[{"zoo": "lstm_lm"}]', "token ids"),
        ('[{"children_of": "seed", "count": 0}]', "count must be"),
        ('[{"zoo": "digits_cnn"}, {"zoo": "digits_cnn"}]', "duplicate"),
    ],
)
def test_bad_candidates_files_are_config_errors(tmp_path, content, words):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=words):
        resolve(str(path), SHAPE, K)


def test_a_spec_of_another_shape_does_not_fit(tmp_path):
    seed_spec((3, 32, 32), K).save(tmp_path / "big.json")
    (tmp_path / "c.json").write_text('[{"spec": "big.json"}]')
    with pytest.raises(
        ConfigError, match="takes input 3x32x32 with 10 classes; the data set gives 1x8x8"
    ):
        resolve(str(tmp_path / "c.json"), SHAPE, K)


def test_a_zoo_model_that_cannot_run_on_the_input_does_not_fit(tmp_path):
    (tmp_path / "c.json").write_text('[{"zoo": "alexnet"}]')
    with pytest.raises(ConfigError, match="candidate 'alexnet' does not fit input 1x8x8"):
        resolve(str(tmp_path / "c.json"), SHAPE, K)


def test_unknown_set_name():
    with pytest.raises(ConfigError, match="small, matched, zoo"):
        resolve("medium", SHAPE, K)
    with pytest.raises((SpecError, ConfigError)):
        resolve("missing.json", SHAPE, K)
