"""Tests for aihpc.mlperf.log: the MLPerf log writer and our compliance rules."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import mlperf_logging.compliance_checker as checker_pkg
import numpy as np
import pytest
import torch
import yaml

from aihpc.base.errors import ConfigError, DataError, StorageError
from aihpc.mlperf import log as mlperf
from aihpc.mlperf.check import RULES_DIR, RULES_FILE, check_compliance
from aihpc.mlperf.log import BENCHMARK, MLPerfLog

T0 = 1_700_000_000_000  # ms since the epoch; fixed so tests are reproducible
ACCURACIES = [0.21, 0.35, 0.30, 0.52, 0.49, 0.61]


def write_run(path: Path) -> list[float]:
    """A short but complete AutoML run: 6 trial-epochs from 3 trials; returns best-so-far."""
    bests = []
    with MLPerfLog(path) as log:
        log.submission_info(
            "aihpc-dev",
            "test-vm-2xCPU",
            division="open",
            status="research",
            number_of_nodes=1,
            accelerators_per_node=0,
        )
        log.cache_clear()
        log.init_start()
        log.staging_start()
        log.staging_stop(staged_bytes=150_000_000)
        log.train_samples(50_000)
        log.eval_samples(10_000)
        log.init_stop()
        log.event("seed", 1234)
        log.run_start(time_ms=T0)
        for k, acc in enumerate(ACCURACIES, start=1):
            trial = (k - 1) % 3
            bests.append(
                log.trial_epoch(
                    k,
                    acc,
                    start_ms=T0 + 1000 * k,
                    stop_ms=T0 + 1000 * k + 900,
                    trial_id=trial,
                    trial_epoch=(k - 1) // 3 + 1,
                )
            )
        log.run_stop("success", time_ms=T0 + 10_000)
    return bests


def read(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines), lines
    return [json.loads(line[len(":::MLLOG ") :]) for line in lines]


def write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(f":::MLLOG {json.dumps(e)}\n" for e in events))
    return path


@pytest.fixture
def good_log(tmp_path: Path) -> Path:
    path = tmp_path / "run.log"
    write_run(path)
    return path


def test_complete_run_passes_checker(good_log: Path) -> None:
    ok, output = check_compliance(good_log)
    assert ok, output
    # our entry file ran and chained to the copy of HPC 3.0.0 common.yaml
    assert "aihpc_automl.yaml" in output and "hpc_3.0.0_common.yaml" in output


def test_log_content_follows_the_design(good_log: Path) -> None:
    events = read(good_log)
    keys = [e["key"] for e in events]
    for once in (
        "submission_benchmark",
        "submission_org",
        "init_stop",
        "run_start",
        "run_stop",
        "train_samples",
        "eval_samples",
    ):
        assert keys.count(once) == 1, once
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    assert keys[-1] == "run_stop"
    assert events[-1]["metadata"]["status"] == "success"
    assert next(e for e in events if e["key"] == "submission_benchmark")["value"] == BENCHMARK
    epochs = [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"]
    assert epochs == list(range(1, len(ACCURACIES) + 1))
    accs = [e for e in events if e["key"] == "eval_accuracy"]
    expected_best = [max(ACCURACIES[: i + 1]) for i in range(len(ACCURACIES))]
    assert [e["value"] for e in accs] == expected_best
    assert [e["metadata"]["trial_accuracy"] for e in accs] == ACCURACIES
    starts = [e["time_ms"] for e in events if e["key"] == "epoch_start"]
    assert starts == [T0 + 1000 * k for k in range(1, len(ACCURACIES) + 1)]
    assert all(e["event_type"] == "INTERVAL_START" for e in events if e["key"].endswith("_start"))
    # mllog's caller info points at this test file, not at aihpc's internals
    assert {Path(e["metadata"]["file"]).name for e in events} == {Path(__file__).name}


def test_trial_epoch_returns_best_so_far(tmp_path: Path) -> None:
    assert write_run(tmp_path / "x.log") == [
        max(ACCURACIES[: i + 1]) for i in range(len(ACCURACIES))
    ]


def _drop(key: str) -> Callable[[list[dict]], list[dict]]:
    return lambda events: [e for e in events if e["key"] != key]


def _strip_epoch_from_eval_accuracy(events: list[dict]) -> list[dict]:
    for e in events:
        if e["key"] == "eval_accuracy":
            del e["metadata"]["epoch_num"]
            break
    return events


def _set_value(key: str, value: object) -> Callable[[list[dict]], list[dict]]:
    def mutate(events: list[dict]) -> list[dict]:
        for e in events:
            if e["key"] == key:
                e["value"] = value
        return events

    return mutate


def _decreasing_best(events: list[dict]) -> list[dict]:
    accs = [e for e in events if e["key"] == "eval_accuracy"]
    accs[-1]["value"] = accs[0]["value"] / 2
    return events


def _repeat_eval_epoch(events: list[dict]) -> list[dict]:
    accs = [e for e in events if e["key"] == "eval_accuracy"]
    accs[2]["metadata"]["epoch_num"] = accs[1]["metadata"]["epoch_num"]
    return events


def _run_start_before_init_stop(events: list[dict]) -> list[dict]:
    i, j = (
        next(i for i, e in enumerate(events) if e["key"] == k) for k in ("init_stop", "run_start")
    )
    events[i], events[j] = events[j], events[i]
    return events


def _drop_run_stop_status(events: list[dict]) -> list[dict]:
    del events[-1]["metadata"]["status"]
    return events


def _drop_epoch_num(key: str) -> Callable[[list[dict]], list[dict]]:
    def mutate(events: list[dict]) -> list[dict]:
        for e in events:
            if e["key"] == key:
                del e["metadata"]["epoch_num"]
        return events

    return mutate


BROKEN = {
    # rules of the (copied) HPC 3.0.0 common.yaml
    "missing run_stop": (_drop("run_stop"), "run_stop"),
    "missing submission_org": (_drop("submission_org"), "submission_org"),
    "bad division": (_set_value("submission_division", "premier"), "submission_division"),
    "missing cache_clear": (_drop("cache_clear"), "cache_clear"),
    "missing train_samples": (_drop("train_samples"), "train_samples"),
    "run_start before init_stop": (_run_start_before_init_stop, "run_start"),
    "run_stop without status": (_drop_run_stop_status, "run_stop"),
    "no eval_start": (_drop("eval_start"), "eval_start"),
    "epoch_start without epoch_num": (_drop_epoch_num("epoch_start"), "epoch_start"),
    # our aihpc_automl rules
    "wrong benchmark name": (_set_value("submission_benchmark", "resnet"), "submission_benchmark"),
    "missing number_of_nodes": (_drop("number_of_nodes"), "number_of_nodes"),
    "eval_accuracy without epoch_num": (_strip_epoch_from_eval_accuracy, "eval_accuracy"),
    "no eval_accuracy": (_drop("eval_accuracy"), "eval_accuracy"),
    "best accuracy decreases": (_decreasing_best, "eval_accuracy"),
    "eval epoch not increasing": (_repeat_eval_epoch, "eval_accuracy"),
    "accuracy above 1": (_set_value("eval_accuracy", 61.0), "eval_accuracy"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_log_fails_checker(good_log: Path, tmp_path: Path, name: str) -> None:
    mutate, key = BROKEN[name]
    bad = write(tmp_path / "bad.log", mutate(read(good_log)))
    assert bad.read_text() != good_log.read_text()
    ok, output = check_compliance(bad)
    assert not ok, output
    assert "FAILED" in output and key in output, output


def test_packaged_hpc_rules_alone_reject_our_benchmark(good_log: Path, tmp_path: Path) -> None:
    """Why we ship a copy of common.yaml: MLPerf's own chain cannot take 'aihpc_automl'."""
    upstream = Path(checker_pkg.__file__).parent / "hpc_3.0.0" / "common.yaml"
    ok, output = check_compliance(good_log, rules=upstream)
    assert not ok
    assert "open_aihpc_automl.yaml" in output


def test_common_copy_differs_from_upstream_only_by_division_post() -> None:
    upstream = yaml.safe_load(
        (Path(checker_pkg.__file__).parent / "hpc_3.0.0" / "common.yaml").read_text()
    )
    ours = yaml.safe_load((RULES_DIR / "hpc_3.0.0_common.yaml").read_text())
    division = next(
        r["KEY"] for r in upstream if "KEY" in r and r["KEY"]["NAME"] == "submission_division"
    )
    assert "enqueue_config" in division.pop("POST")
    assert ours == upstream
    entry = yaml.safe_load(RULES_FILE.read_text())
    entry_keys = {r["KEY"]["NAME"] for r in entry if "KEY" in r}
    common_keys = {r["KEY"]["NAME"] for r in ours if "KEY" in r}
    assert BENCHMARK and "submission_benchmark" in entry_keys
    assert not entry_keys & common_keys  # overlapping keys would silence common's messages


def test_two_instances_write_their_own_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root_handlers = list(logging.getLogger().handlers)
    mllog_default_handlers = list(logging.getLogger("mllog_default").handlers)
    caplog.set_level(logging.DEBUG)
    a, b = MLPerfLog(tmp_path / "a.log"), MLPerfLog(tmp_path / "sub" / "b.log")
    a.event("only_a", 1)
    b.event("only_b", 2)
    a.event("only_a", 3)
    a.close()
    b.event("only_b", 4)
    b.close()
    assert [(e["key"], e["value"]) for e in read(tmp_path / "a.log")] == [
        ("only_a", 1),
        ("only_a", 3),
    ]
    assert [(e["key"], e["value"]) for e in read(tmp_path / "sub" / "b.log")] == [
        ("only_b", 2),
        ("only_b", 4),
    ]
    assert not [r for r in caplog.records if "MLLOG" in r.getMessage()]  # nothing propagated
    assert logging.getLogger().handlers == root_handlers
    assert logging.getLogger("mllog_default").handlers == mllog_default_handlers
    assert not [name for name in logging.root.manager.loggerDict if name.startswith("aihpc.mlperf")]


def test_close_flushes_detaches_and_is_idempotent(tmp_path: Path) -> None:
    log = MLPerfLog(tmp_path / "c.log")
    log.event("k", {"nested": [1, 2.5, "x"]})
    assert len(read(tmp_path / "c.log")) == 1  # flushed per line, before close
    log.close()
    assert log.closed
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.event("k", 1)


def test_a_trial_epochs_lines_are_on_disk_when_it_returns(tmp_path: Path) -> None:
    """Its five lines are flushed once, at the end of the call, not one by one: each on disk before
    the next call, as the master's resume relies on."""
    log = MLPerfLog(tmp_path / "t.log")
    log.run_start()
    log.trial_epoch(1, 0.25, trial_id=7)
    assert [e["key"] for e in read(tmp_path / "t.log")] == [
        "run_start",
        "epoch_start",
        "epoch_stop",
        "eval_start",
        "eval_stop",
        "eval_accuracy",
    ]
    log.close()


def test_a_line_that_cannot_be_written_is_a_storage_error(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    log = MLPerfLog("/dev/full", append=True)
    with pytest.raises(StorageError, match="cannot write MLPerf log '/dev/full': .*No space left"):
        log.event("k", 1)
    with pytest.raises(StorageError, match="cannot write MLPerf log"):  # the line still held
        log.close()
    assert log.closed
    log.close()
    # a trial-epoch's lines, flushed once at the end of the call: the same error there
    log = MLPerfLog("/dev/full", append=True)
    log.resumed(0, None)  # a run started earlier in the file
    with pytest.raises(StorageError, match="cannot write MLPerf log '/dev/full': .*No space left"):
        log.trial_epoch(1, 0.5, trial_id=1)
    with pytest.raises(StorageError):
        log.close()


def test_append_mode_keeps_previous_lines(tmp_path: Path) -> None:
    with MLPerfLog(tmp_path / "a.log") as log:
        log.event("first", 1)
    with MLPerfLog(tmp_path / "a.log", append=True) as log:
        log.event("second", 2)
    assert [e["key"] for e in read(tmp_path / "a.log")] == ["first", "second"]


def test_exception_in_with_block_logs_aborted_run(tmp_path: Path) -> None:
    path = tmp_path / "aborted.log"
    with pytest.raises(RuntimeError):
        with MLPerfLog(path) as log:
            log.run_start()
            raise RuntimeError("worker died")
    last = read(path)[-1]
    assert last["key"] == "run_stop"
    assert last["metadata"]["status"] == "aborted" and last["metadata"]["error"] == "RuntimeError"


def test_numpy_and_torch_values_become_json(tmp_path: Path) -> None:
    with MLPerfLog(tmp_path / "n.log") as log:
        log.event("np", np.float32(0.5), {"i": np.int64(3), "arr": np.arange(2)})
        log.event("t", torch.tensor(7))
        with pytest.raises(TypeError, match="must be JSON data"):
            log.event("obj", object())
        with pytest.raises(ValueError, match="finite"):
            log.event("nan", float("nan"))
    events = read(tmp_path / "n.log")
    assert events[0]["value"] == 0.5 and events[0]["metadata"]["i"] == 3
    assert events[0]["metadata"]["arr"] == [0, 1] and events[1]["value"] == 7
    assert len(events) == 2  # the rejected values wrote nothing


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"division": "premier"}, "division must be one of .*'premier'"),
        ({"status": "lab"}, "status must be one of .*'lab'"),
        ({"number_of_nodes": 0}, "number_of_nodes must be an integer >= 1, got 0"),
        ({"accelerators_per_node": -1}, "accelerators_per_node must be an integer >= 0, got -1"),
    ],
)
def test_submission_info_rejects_bad_config(tmp_path: Path, kwargs: dict, match: str) -> None:
    with MLPerfLog(tmp_path / "s.log") as log, pytest.raises(ConfigError, match=match):
        log.submission_info("org", "platform", **kwargs)
    with MLPerfLog(tmp_path / "s2.log") as log, pytest.raises(ConfigError, match="org"):
        log.submission_info("  ", "platform")


def test_api_enforces_epoch_and_eval_ordering(tmp_path: Path) -> None:
    with MLPerfLog(tmp_path / "o.log") as log:
        with pytest.raises(ValueError, match="between run_start and run_stop"):
            log.epoch_start(1)
        with pytest.raises(ValueError, match="run_stop before run_start"):
            log.run_stop()
        log.run_start()
        with pytest.raises(ValueError, match="only once"):
            log.run_start()
        with pytest.raises(ValueError, match="epoch must be an integer >= 1, got 0"):
            log.epoch_start(0)
        log.epoch_start(2)
        with pytest.raises(ValueError, match="must be stopped before epoch 3"):
            log.epoch_start(3)
        with pytest.raises(ValueError, match="open epoch 2, got 1"):
            log.epoch_stop(1)
        log.epoch_stop(2)
        with pytest.raises(ValueError, match="epoch must be > 2"):
            log.epoch_start(2)
        with pytest.raises(ValueError, match="eval epoch must be <= 2"):
            log.eval_start(3)
        log.eval_start(2)
        log.eval_stop(2)
        log.eval_accuracy(0.5, 2)
        with pytest.raises(ValueError, match="eval_accuracy epoch must be > 2"):
            log.eval_accuracy(0.6, 2)
        log.trial_epoch(3, 0.7)
        log.epoch_start(4)
        log.epoch_stop(4)
        with pytest.raises(ValueError, match="best so far and must be >= 0.7"):
            log.eval_accuracy(0.6, 4)
        with pytest.raises(ValueError, match=r"in \[0, 1\], got 1.5"):
            log.trial_epoch(5, 1.5)
        with pytest.raises(ValueError, match="stop_ms must be >= start_ms"):
            log.trial_epoch(5, 0.1, start_ms=10, stop_ms=5)
        assert log.trial_epoch(5, 0.1) == 0.7
        log.run_stop("success")
        with pytest.raises(ValueError, match="only once"):
            log.run_stop()
        with pytest.raises(ValueError, match="run status must be one of"):
            MLPerfLog(tmp_path / "p.log").run_stop("crashed")


def test_check_compliance_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="log file must exist"):
        check_compliance(tmp_path / "nope.log")
    (tmp_path / "x.log").write_text("")
    with pytest.raises(ConfigError, match="rules file must exist"):
        check_compliance(tmp_path / "x.log", rules=tmp_path / "nope.yaml")


def test_empty_log_fails(tmp_path: Path) -> None:
    ok, output = check_compliance(write(tmp_path / "empty.log", []))
    assert not ok and "No log lines detected" in output


def test_rules_are_inside_the_package() -> None:
    assert RULES_FILE.is_file() and RULES_FILE.parent == RULES_DIR
    assert RULES_DIR.parent == Path(mlperf.__file__).resolve().parent
    assert (RULES_DIR / "hpc_3.0.0_common.yaml").is_file()


def test_a_line_is_the_one_mllog_writes(tmp_path: Path) -> None:
    """MLPerfLog makes its lines itself: each is byte for byte mllog's encoding of the same event,
    its file/lineno the caller's (here, this test's line)."""
    from mlperf_logging.mllog import mllog

    path = tmp_path / "one.log"
    with MLPerfLog(path, namespace="ns") as log:
        line = sys._getframe().f_lineno + 1
        log.event("my_key", {"a": [1, 2.5]}, {"trial_id": 3, "file": "overridden"}, time_ms=1234)
    expected = mllog._encode_log(
        "ns",
        1234,
        "POINT_IN_TIME",
        "my_key",
        {"a": [1, 2.5]},
        {"file": "overridden", "lineno": line, "trial_id": 3},
    )
    (written,) = path.read_text().splitlines()
    assert written == expected
    event = json.loads(written.removeprefix(":::MLLOG "))
    assert list(event["metadata"]) == ["file", "lineno", "trial_id"]
