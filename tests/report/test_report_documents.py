"""`aihpc report` renders the explaining commands' result files, made for real by the commands.

The commands run once for the module, one after another in one interpreter of their own, each as
short as its options allow (the report reads the files' shape, not the machine's speed); the
reports run through the CLI's entry point in this
process, as ``python -m aihpc report`` calls it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixture_run import ENVIRONMENT, aihpc_cases, aihpc_main

# one process runs the module under pytest-xdist: its fixture (the result files the commands
# write) is made once
pytestmark = pytest.mark.xdist_group("report-documents")

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    """A directory of result files written by roofline, bench operators/training and profile (one
    interpreter runs the four commands, one after another)."""
    d = tmp_path_factory.mktemp("docs")
    roofline = [
        "roofline",
        "--seconds",
        "0.01",
        "--elements",
        str(2**16),
        "--dtype",
        "float32",  # the dtype the operators below are measured in
        "--out",
        str(d / "roofline.json"),
    ]
    operators = [
        "bench",
        "operators",
        "--quick",
        "--ops",
        "matmul,relu",
        "--dtype",
        "float32",
        "--roofline",
        str(d / "roofline.json"),
        "--out",
        str(d / "bench-operators.json"),
    ]
    training = [
        "bench",
        "training",
        "--model",
        "digits_cnn",
        "--target",
        "0.5",
        "--max-epochs",
        "2",
        "--out",
        str(d / "bench-training.json"),
    ]
    profile = [
        "profile",
        "--model",
        "digits_cnn",
        "--batch",
        "8",
        "--steps",
        "1",
        "--roofline",  # its float32 peak read, not measured again
        str(d / "roofline.json"),
        "--out",
        str(d / "profile.json"),
    ]
    answers = aihpc_cases([(argv, None) for argv in (roofline, operators, training, profile)])
    for argv, (code, _, err) in zip((roofline, operators, training, profile), answers, strict=True):
        assert code == 0, (argv[:2], err)
    return d


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``aihpc report *args`` through the CLI's entry point; its stdout."""
    code, out, err = aihpc_main(capsys, "report", *args)
    assert code == 0, err
    return out


@pytest.mark.slow
def test_one_result_file_gets_a_page_of_its_own(
    documents: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ops.html"
    stdout = _report(capsys, str(documents / "bench-operators.json"), "--out", str(out))
    assert stdout.strip() == str(out)
    page = out.read_text()
    assert "Level 0: operators" in page and "matmul" in page and "relu" in page
    assert "Level 2" not in page  # only the file asked for


@pytest.mark.slow
def test_a_directory_of_result_files_renders_every_section(
    documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _report(capsys, str(documents))
    page = (documents / "report.html").read_text()
    for title in (
        "Roofline",
        "Level 0: operators",
        "Level 2: time to accuracy",
        "Workload characterisation",
    ):
        assert f"<h2>{title}</h2>" in page
    assert 'src="data:image/png;base64,' in page  # the roofline plot, embedded
    assert "http://" not in page and "https://" not in page  # self-contained
    training = json.loads((documents / "bench-training.json").read_text())["data"]
    assert training["stop_reason"] in page


@pytest.mark.slow
def test_a_run_report_gains_the_sections_its_directory_holds(
    documents: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(FIXTURE, run_dir / "results.json")
    (run_dir / "notes.json").write_text('{"not": "a result file"}')  # other JSON is left alone
    _report(capsys, str(run_dir))
    assert "<h2>Roofline</h2>" not in (run_dir / "report.html").read_text()
    shutil.copy(documents / "roofline.json", run_dir / "roofline.json")
    _report(capsys, str(run_dir))
    page = (run_dir / "report.html").read_text()
    assert "<h2>Trials</h2>" in page and "<h2>Roofline</h2>" in page


def test_the_roofline_section_says_what_the_processor_does_not_compute() -> None:
    """A float16 peak measured on one kernel (a processor without float16 arithmetic) carries
    its note, and a dtype left out of the defaults has its row saying why."""
    from aihpc.machine.processor import Processor
    from aihpc.records.files import result_document
    from aihpc.report.documents import render_sections
    from aihpc.report.markup import esc
    from aihpc.roofline.machine import left_out_dtypes, measure_machine

    avx2 = Processor(extensions=("avx2", "f16c", "fma"))  # no bfloat16 or float16 arithmetic
    left_out = {"bfloat16": left_out_dtypes("cpu", avx2)["bfloat16"]}
    data = measure_machine("cpu", ["float16"], 0.01, 4096, left_out=left_out, processor=avx2)
    page = render_sections([result_document("roofline", data, environment=ENVIRONMENT)])
    note = data.peaks["float16"].note
    assert note is not None and note.startswith("this processor has no float16 arithmetic")
    assert esc(note) in page
    assert (
        f"<th>not measured, bfloat16</th><td>left out of the defaults: {esc(left_out['bfloat16'])}"
        in page
    )


def test_a_real_file_of_every_kind_gets_its_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The result files the commands wrote (tests/fixtures/kinds), one section each."""
    from kind_files import real_file

    titles = {
        "roofline": "Roofline",
        "bench-operators": "Level 0: operators",
        "bench-network": "Level 1: network",
        "profile": "Workload characterisation",
        "recommend": "Model recommendation",
        "recommend-calibration": "Recommendation matcher calibration",
        "recommend-validation": "Recommendation validation",
    }
    for kind in titles:
        shutil.copy(real_file(kind), tmp_path / f"{kind}.json")
    _report(capsys, str(tmp_path))
    page = (tmp_path / "report.html").read_text()
    assert [title for title in titles.values() if f"<h2>{title}</h2>" not in page] == []
    recommend = json.loads(real_file("recommend").read_text())["data"]
    assert f"<th>recommendation</th><td>{recommend['choice']}</td>" in page
