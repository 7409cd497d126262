"""infer.json as records (aihpc.records.inference, inference_scenarios): real files of two
schema generations read into typed records, and a file with one inner field broken refused in
one line naming the file and the field, by the reader and by the commands that read it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.records.codec import UNSET
from aihpc.records.files import InferFile, read_result_file
from aihpc.records.inference import InferData, comparison_fields, score, workload
from aihpc.records.inference_scenarios import ServerScenario, StreamScenario
from fixture_run import FIXTURES, aihpc_main

RECORDS = FIXTURES / "gpu-check"
#: an image zoo model's result with every field of today's files
RESNET = RECORDS / "infer-resnet50-cpu.json"
#: a language model's, written before warm_up, duration, the search and kept_up were recorded
LM = RECORDS / "infer-lm-cpu.json"


def _data(path: Path) -> InferData:
    document = read_result_file(path, "infer")
    assert isinstance(document, InferFile)
    return document.data


def test_today_s_file_reads_into_records_field_by_field() -> None:
    raw = json.loads(RESNET.read_text())["data"]
    data = _data(RESNET)
    assert data.source.zoo_model == raw["source"]["zoo_model"] == "resnet50"
    assert data.source.input_shape == tuple(raw["source"]["input_shape"])
    assert data.source.arch is None and data.source.run is None
    assert data.warm_up is not None and data.warm_up["1"].served_as == "eager"
    assert data.duration is not None
    assert data.duration.total_s == raw["duration"]["total_s"]
    assert data.scenarios.names() == ["offline", "single-stream", "server"]
    offline, server = data.scenarios.offline, data.scenarios.server
    assert isinstance(offline, StreamScenario) and isinstance(server, ServerScenario)
    assert offline.samples_per_second == raw["scenarios"]["offline"]["samples_per_second"]
    assert (
        offline.tests[0].energy[0].reason
        == raw["scenarios"]["offline"]["tests"][0]["energy"][0]["reason"]
    )
    # the point the server shows is the curve's point at its best rate
    shown = server.point()
    assert shown is not None and shown.target_qps == server.max_qps
    assert shown in server.curve
    assert score(data) == server.max_qps == raw["scenarios"]["server"]["max_qps"]


def test_an_older_file_reads_with_what_it_lacks_absent() -> None:
    data = _data(LM)
    assert data.warm_up is None and data.duration is None and data.batch_sizes is None
    assert data.source.best_val_loss is not None and data.source.trial == 1
    server = data.scenarios.server
    assert server is not None and server.search is None
    assert server.curve[0].kept_up is UNSET and server.tests[0].timing is None
    assert data.generation is not None and data.generation.new_tokens == 64
    assert workload(data).startswith("aihpc_infer lm trial ")
    assert workload(data).endswith(", 64+64 tokens, server ttft <= 2 s, tpot <= 100 ms")
    environment = read_result_file(LM, "infer").environment
    fields = comparison_fields(data, environment, 1)
    assert fields["score"] == server.max_qps and fields["best_val_loss"] == data.quality.served


#: (the path of a field of ``data``, a value of the wrong type, what the reader says of it: a
#: mapping's key as msgspec names it, ``[...]``)
BROKEN = [
    (("source", "input_shape"), "1x8x8", "data.source.input_shape: expected array | null, got str"),
    (("warm_up", "1", "served_as"), 3, "data.warm_up[...].served_as: expected str, got int"),
    (("duration", "total_s"), "long", "data.duration.total_s: expected float, got str"),
    (
        ("scenarios", "server", "curve", 0, "valid"),
        "yes",
        "data.scenarios.server.curve[0].valid: expected bool, got str",
    ),
    (
        ("scenarios", "offline", "tests", 0, "timing", "tail", "samples"),
        1.5,
        "data.scenarios.offline.tests[0].timing.tail.samples: expected int, got float",
    ),
    (
        ("scenarios", "single-stream", "tests", 0, "results", "validity"),
        ["VALID"],
        "data.scenarios.single-stream.tests[0].results[...]: expected bool | int | float | str | "
        "null, got array",
    ),
]


def _broken(tmp_path: Path, path: tuple[str | int, ...], value: object) -> Path:
    folder = tmp_path / "infer"
    folder.mkdir()
    document = json.loads(RESNET.read_text())
    target = document["data"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (folder / "infer.json").write_text(json.dumps(document))
    return folder / "infer.json"


@pytest.mark.parametrize(("path", "value", "said"), BROKEN, ids=[p[0][-1] for p in BROKEN])
def test_a_file_with_one_inner_field_broken_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, path: tuple[str | int, ...], value: object, said: str
) -> None:
    file = _broken(tmp_path, path, value)
    with pytest.raises(DataError) as caught:
        read_result_file(file, "infer")
    assert str(caught.value) == f"result file {file}: {said}"


@pytest.mark.parametrize("command", ["verify", "report", "compare"])
def test_the_commands_that_read_it_refuse_it_in_one_line(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, value, said = BROKEN[3]
    file = _broken(tmp_path, path, value)
    args = [str(file.parent)]
    if command == "compare":  # beside a whole result
        shutil.copy(RESNET, tmp_path / "other.json")
        args = [str(file), str(tmp_path / "other.json")]
    code, _, stderr = aihpc_main(capsys, command, *args)
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and said in stderr and str(file) in stderr
