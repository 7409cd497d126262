"""``aihpc run --task lm`` as a user types it: a run killed and resumed, its results, its MLPerf
log under the language task's rules, ``verify`` (and tampering caught), ``report``, and
``compare`` refusing to set it beside an image run."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import query_store

from aihpc.mlperf.check import RULES_DIR, check_compliance
from fixture_run import FIXTURES, aihpc, aihpc_main

pytestmark = [pytest.mark.xdist_group("runs2"), pytest.mark.slow]  # beside "runs": see Makefile

# A small language and a small search, on one worker: documents of 32 tokens, epochs of 8,192
# tokens.
TIMEOUT = 300  # seconds for one aihpc command here (the shared helper allows 240)
CONFIG = """
task = "lm"
workers = 1
threads_per_worker = 1
epochs_min = 1
epochs_max = 2
batch_sizes = [8, 16]
report_seconds = 5.0
peak_seconds = 0.2

[data_options]
context = 32
train_tokens = 65536
val_tokens = 8192
epoch_tokens = 8192
"""


def _ok_epochs(db: Path) -> int:
    return len(query_store(db, "SELECT 1 FROM epochs WHERE status = 'ok'"))


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A language-model run whose master was killed after two epochs, then resumed."""
    tmp = tmp_path_factory.mktemp("lm")
    config, run_dir = tmp / "lm.toml", tmp / "run"
    config.write_text(CONFIG)
    master = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--minutes",
            "0.35",  # killed at about 5 s of its clock under the full suite, resumed for the rest
            "--config",
            str(config),
            "--out",
            str(run_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while _ok_epochs(run_dir / "aihpc.sqlite") < 2:
        assert master.poll() is None, f"the run ended before two epochs: {master.stderr.read()}"
        assert time.monotonic() < deadline, "two trial-epochs did not finish within 240 s"
        time.sleep(0.5)
    os.killpg(master.pid, signal.SIGKILL)
    master.wait()
    proc = aihpc("run", "--resume", str(run_dir), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "best val loss" in proc.stdout and "loss floor" in proc.stdout
    return run_dir


def test_a_resumed_language_model_run_scores_its_loss_against_the_floor(lm_run: Path) -> None:
    results = json.loads((lm_run / "results.json").read_text())
    score, data = results["score"], results["data"]
    assert results["config"]["task"] == "lm" and len(results["segments"]) == 2
    assert score["best_accuracy"] is None and score["error_percent"] is None
    losses = [t["best_val_loss"] for t in results["trials"] if t["best_val_loss"] is not None]
    assert score["best_val_loss"] == min(losses)
    assert score["loss_floor"] == data["floor"] < data["bigram_loss"] < data["unigram_loss"]
    assert score["max_val_loss"] == data["bigram_loss"]  # the default threshold
    assert score["gap_to_floor"] == pytest.approx(score["best_val_loss"] - data["floor"])
    reducible = (data["unigram_loss"] - data["floor"]) / (score["best_val_loss"] - data["floor"])
    assert score["regulated_score"] == pytest.approx(
        score["ops_per_second"] * max(0.0, math.log(reducible))
    )
    assert all("arch" in t or "arch_diff" in t for t in results["trials"])
    flops = results["model_flops"]
    assert flops["total"] == pytest.approx(
        sum(e.get("model_flops", 0) for t in results["trials"] for e in t["epochs"])
    )
    assert (
        0 < flops["total"] < score["ops"]
    )  # the counted operations include the evaluation and more
    ok, output = check_compliance(lm_run / "mlperf.log", rules=RULES_DIR / "aihpc_automl_lm.yaml")
    assert ok, output


def test_verify_passes_and_catches_a_changed_loss(
    lm_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = aihpc_main(capsys, "verify", str(lm_run))
    assert code == 0 and "VERIFIED" in out, out + err
    copy = tmp_path / "run"
    shutil.copytree(lm_run, copy, ignore=shutil.ignore_patterns("weights"))
    path = copy / "results.json"
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith('"score":'):
            score = json.loads("{" + line.rstrip().rstrip(",") + "}")["score"]
            score["best_val_loss"] -= 0.1
            lines[i] = '"score":' + json.dumps(score, sort_keys=True, separators=(",", ":")) + ",\n"
    path.write_text("".join(lines))
    code, out, _ = aihpc_main(capsys, "verify", str(copy))
    assert code == 4 and "best_val_loss" in out, out


def test_report_and_count_read_it_and_compare_keeps_it_apart_from_images(
    lm_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = aihpc_main(capsys, "report", str(lm_run))
    assert code == 0, err
    page = (lm_run / "report.html").read_text()
    assert "Best validation loss" in page and "floor" in page
    arch = json.loads((lm_run / "results.json").read_text())["trials"][0][
        "arch"
    ]  # the seed's, in full
    spec = tmp_path / "lm.json"
    spec.write_text(json.dumps(arch))
    code, out, err = aihpc_main(capsys, "count", "--spec", str(spec), "--train", "--json")
    assert code == 0, err
    assert json.loads(out)["total"] > 0
    code, _, err = aihpc_main(capsys, "compare", str(lm_run), str(FIXTURES / "run"))
    assert code == 2 and "different workloads" in err, err


def test_infer_serves_the_best_language_model_with_a_key_value_cache(
    lm_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aihpc infer RUN_DIR: the best trial generates under LoadGen, its first token and each next
    one timed; quality is the loss in float32; operations per query are the prefill and decode
    steps counted."""
    from aihpc.tasks import task_of
    from aihpc.tasks.language.decode import decode_ops

    folder = tmp_path / "infer"
    code, out, err = aihpc_main(
        capsys,
        "infer",
        str(lm_run),
        "--scenario",
        "offline",
        "--scenario",
        "single-stream",
        "--samples",
        "32",
        "--seconds",
        "0.5",
        "--prompt-tokens",
        "16",
        "--new-tokens",
        "8",
        "--threads",
        "1",  # this process's share of the cores (tests/conftest.py)
        "--peak-seconds",
        "0.2",
        "--out",
        str(folder),
    )
    assert code == 0, err
    assert "first token p99" in out and "prompts of 16 tokens, 8 new tokens each" in out
    data = json.loads((folder / "infer.json").read_text())["data"]
    assert data["valid"] and data["quality"]["measure"] == "loss" and data["quality"]["kept"] == 1.0
    results = json.loads((lm_run / "results.json").read_text())
    best = min(
        (t for t in results["trials"] if t["best_val_loss"] is not None),
        key=lambda t: t["best_val_loss"],
    )
    assert data["source"]["trial"] == best["id"]
    spec = task_of("lm").arch(data["source"]["arch"])
    assert data["ops_per_query"] == sum(decode_ops(spec, 16, 8))
    single = data["scenarios"]["single-stream"]
    assert 0 < single["p99_first_token_s"] < single["p99_latency_s"]
    assert single["p99_time_per_output_token_s"] > 0
