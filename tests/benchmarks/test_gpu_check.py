"""benchmarks/gpu_check.sh and what it calls, on this CPU: its refusals of bad steps and settings
(one line, exit 2, nothing run), gpu_fill.py's profiled epoch of the language seed, and the
summary it writes from the files a call leaves in $OUT (benchmarks/gpu_summary.py).

The summary is made from real records, each where a GPU call would put it: the H200 language run
(fixtures/h200-lm), the suite's fixture run standing for the image run, `aihpc infer` records
made on this CPU (fixtures/gpu-check: infer-resnet50-cpu.json, the zoo ResNet-50 at 3x32x32, 64
samples, 3-second tests, 2 server steps, a 200 ms bound, 0.5-s peak stages; infer-lm-cpu.json,
the best trial of a 0.3-minute CPU language run of 16,384-token epochs, 16 samples, 1-second
tests, 2 server steps), `aihpc verify --json` of the ResNet-50 record, of the fixture run and of
a copy of it with one trial's operations changed (verify-tampered.json), and a profile made here.
Regenerate them with those commands.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aihpc
from fixture_run import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
RECORDS = FIXTURES / "gpu-check"
SRC = str(Path(aihpc.__file__).parents[1])  # the script's Python imports this aihpc
ENV = {
    **os.environ,
    "PYTHON": sys.executable,
    "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
}


def gpu_check(*args: str, out: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        env={**ENV, "OUT": str(out), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, env, line",
    [
        ((), {}, "name the steps to run: all, or some of lm, lm-step, fill"),
        (("lm", "bogus"), {}, "a step is all or one of lm, lm-step, fill, compile, stream, "),
        (("all", "tests"), {}, "all runs every step: name all alone, or the steps"),
        (("infer-lm", "lm"), {}, "infer-lm serves the best trial of this call's language run"),
        (("lm",), {"LM_MINUTES": "0"}, "LM_MINUTES must be a positive number, got '0'"),
        (("all",), {"BUDGET": "9m"}, "BUDGET must be a positive number, got '9m'"),
        (("infer",), {"SERVER_STEPS": "-1"}, "SERVER_STEPS must be a positive number, got '-1'"),
    ],
)
def test_bad_steps_and_settings_are_refused_in_one_line(tmp_path, args, env, line):
    out = tmp_path / "out"
    done = gpu_check(*args, out=out, **env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"gpu_check: {line}") and done.stderr.count("\n") == 1
    assert not out.exists()  # nothing made, nothing installed


def test_kernel_groups_by_name(bench):
    group = bench("gpu_fill").kernel_group
    # kernel names as torch.profiler gives them (PyTorch's, cuBLAS's, cuDNN's, Triton's)
    names = {
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
        "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul>)": "elementwise",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
        "float, float const*, float const*, float const*, float*, float*, float*)": "elementwise",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMath"
        "Functor<float, 4, (at::native::ADAM_MODE)1, false>>(...)": "elementwise",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "elementwise",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas": "matrix products",
        "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NTN": "matrix products",
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64": (
            "matrix products"
        ),
        "triton_tem_fused_mm_0": "matrix products",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_"
        "cga1x1x1_kernel0_0": "attention",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, "
        "false, true, false, false, true, true, false, false>(Flash_fwd_params)": "attention",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
        "float, float, float, float>, unsigned int, float, 4, 4> >(ReduceOp<...>)": "other",
        "Memcpy HtoD (Pinned -> Device)": "other",
    }
    assert {name: group(name) for name in names} == names


@pytest.fixture(scope="module")
def lm_profile(tmp_path_factory) -> dict:
    """gpu_fill.py's profiled epoch of the language seed, on this CPU: 16 windows of 128 tokens."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_fill
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return gpu_fill.profile("lm", "cpu", 16)


@pytest.mark.slow
def test_the_language_seed_is_profiled_on_the_cpu(lm_profile, bench):
    f = lm_profile
    assert (f["task"], f["device"], f["samples"], f["batch"]) == ("lm", "cpu", 16, 16)
    assert f["params"] == 80_208  # the CPU seed: width 48, 2 blocks, vocabulary 257
    assert 0 < f["steps_s"] <= f["epoch_s"]
    assert f["idle_epoch"] is None and f["kernel_s"] == 0.0  # no GPU: no kernels
    types = dict(f["types"])
    assert types["mm"] > 0 and "attention" in types  # the matrix products, the fused attention
    lines = bench("gpu_fill").profile_text(f)
    assert lines[0].startswith(
        "profiled epoch    lm seed (80,208 parameters) on cpu, 16 windows, batch 16"
    )
    assert lines[1].startswith("CPU time by type  ") and "GPU" not in "".join(lines)


def _call_folder(out: Path, lm_profile: dict) -> Path:
    """$OUT as a call of lm, infer, fill, infer-lm and verify leaves it (the verify of infer-lm
    stopped by its timeout)."""
    out.mkdir()
    shutil.copy(FIXTURES / "h200-lm" / "results.json", out / "lm-results.json")
    (out / "lm-profile.json").write_text(json.dumps(lm_profile))
    shutil.copy(FIXTURES / "run" / "results.json", out / "fill-results.json")
    shutil.copy(RECORDS / "infer-resnet50-cpu.json", out / "infer-resnet50.json")
    shutil.copy(RECORDS / "infer-lm-cpu.json", out / "infer-lm.json")
    shutil.copy(RECORDS / "verify-tampered.json", out / "verify-lm.json")
    shutil.copy(RECORDS / "verify-run.json", out / "verify-fill.json")
    shutil.copy(RECORDS / "verify-infer.json", out / "verify-infer-resnet50.json")
    (out / "device.txt").write_text("NVIDIA H200, torch 2.11.0+cu130, aihpc 0.1.0\n")
    steps = [("lm", "ok", 241, 420), ("infer", "ok", 70, 180), ("fill", "ok", 160, 300),
             ("infer-lm", "ok", 80, 180), ("verify-lm", "failed", 9, 120),
             ("verify-infer-lm", "timed out", 121, 120)]  # fmt: skip
    (out / "steps.tsv").write_text(
        "".join(
            f"{n}\t{s}\t{t}\t{limit}\t{'stopped after 120 s' if s == 'timed out' else ''}\n"
            for n, s, t, limit in steps
        )  # fmt: skip
    )
    return out


@pytest.mark.slow  # its profile (the module's fixture)
def test_the_summary_of_a_call_has_every_figure(tmp_path, lm_profile):
    out = _call_folder(tmp_path / "out", lm_profile)
    done = gpu_check("summary", out=out)
    assert done.returncode == 0, done.stderr
    text = (out / "summary.md").read_text()
    assert done.stdout == text and text.startswith("# gpu_check summary\n\nDevice: NVIDIA H200")
    lm, rest = text.split("## Language run", 1)[1].split("## Image run", 1)
    image, serving = rest.split("## ResNet-50 served", 1)
    serving, best = serving.split("## The language run's best trial served", 1)
    # the language run (the H200's): trials, share of peak, busy, overhead, kernels, verify
    for row in (
        "| trials trained and lost | 1 trial (deadline 1), 1 trained, 2 epochs (1 evaluated); ",
        "| share of the measured peak | 33.6 % of 667 TFLOP/s | at least 45 % in 3 minutes, 55 % ",
        "| workers busy (a task in hand) | 99.2 % |",
        "| training and evaluation / harness overhead | 78.4 % / 21.6 % | overhead under 5 % |",
        "(16 windows, batch 16, 80,208 parameters, on cpu) | no GPU kernels recorded",
        "| aihpc verify | DOES NOT VERIFY: 1 mismatches, the first: results: trial 2: ",
    ):
        assert row in lm, row
    # the image run: its share against the 25 % goal, and its verify
    assert "| share of the measured peak | 8.6 % of 26.3 GFLOP/s | at least 25 % |" in image
    assert "| aihpc verify | VERIFIED | VERIFIED |" in image
    # ResNet-50 served: the server's rate within its bound against the offline rate
    data = json.loads((RECORDS / "infer-resnet50-cpu.json").read_text())["data"]["scenarios"]
    ratio = data["server"]["max_qps"] / data["offline"]["samples_per_second"]
    for row in (
        f"| server within 200 ms at p99 | 213.3 queries/s = {100 * ratio:.1f} % of the offline ",
        "| offline | 353.4 samples/s; 53.0 % of the measured peak, 73.1 % of nominal |",
        "| server p99: queueing / compute | p99 121 ms: queueing 65.1 ms, compute 71.3 ms; "
        "slowest 1 % 124 ms = 66.1 ms + 58.2 ms |",
    ):
        assert row in serving, row
    # the language model served: its bound on tokens, their latencies; its verify stopped
    for row in (
        "| server within first token 2000 ms, per token 100 ms at p99 | 183.3 queries/s = 100.0 ",
        "| server p99: first token / per output token | 386 ms / 2.63 ms |",
        "| aihpc verify | not measured: step verify-infer-lm timed out: stopped after 120 s ",
    ):
        assert row in best, row
    assert text.endswith("## GPU tests\n\nnot measured: step tests did not run in this call\n")


def test_the_summary_counts_the_gpu_tests(tmp_path, bench):
    out = tmp_path / "out"
    out.mkdir()
    (out / "tests.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
        'failures="1" skipped="1" tests="4" time="83.2"><testcase classname="tests.train.test_gpu" '
        'name="test_a" time="1"/><testcase classname="tests.train.test_gpu" name="test_b" time="1">'
        '<failure message="assert 5 &lt;= 4">...</failure></testcase><testcase classname="x" '
        'name="test_c" time="1"><skipped message="no GPU"/></testcase><testcase classname="x" '
        'name="test_d" time="1"/></testsuite></testsuites>'
    )
    text = bench("gpu_summary").summary(out)
    assert "Steps: not recorded (no steps.tsv)." in text
    assert text.rstrip().endswith("2 passed, 1 failed, 1 skipped (failed: test_b), in 83 s")


def test_the_summary_gives_each_way_of_the_language_step(tmp_path, bench):
    """lm_step.py's record (made here: `lm_step.py --smallest --out`): each variant's step time,
    model FLOPs per second and compilation; the H200 run's peak gives their shares."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(RECORDS / "lm-step-cpu.json", out / "lm-step.json")
    shutil.copy(FIXTURES / "h200-lm" / "results.json", out / "lm-results.json")
    text = bench("gpu_summary").summary(out)
    section = text.split("## The language seed's training step, each way", 1)[1].split("##")[0]
    record = json.loads((RECORDS / "lm-step-cpu.json").read_text())["variants"]
    assert [row.split(" | ")[0] for row in section.strip().splitlines()[2:]] == [
        f"| {v['variant']}" for v in record
    ]
    compiled = next(v for v in record if v["variant"] == "compiled-bf16")
    assert (
        f"| compiled-bf16 | {1e3 * compiled['step_s']:.1f} ms a step, 0 TFLOP/s in model FLOPs "
        f"(0.0 % of the measured peak); compile {compiled['compile_s']:.1f} s, regions 1/2 |"
    ) in section


@pytest.mark.slow
def test_a_call_on_a_cpu_records_what_failed_or_was_stopped_and_writes_the_summary(tmp_path):
    """The steps' machinery end to end without a GPU: lm fails (gpu_fill.py finds no GPU), the
    language run's inference is skipped for want of its run, nothing is left to verify, and the
    GPU tests are stopped by their timeout (1 s: pytest has not started them); the summary says
    so and the call exits 1."""
    out = tmp_path / "out"
    done = gpu_check(
        "lm",
        "infer-lm",
        "verify",
        "tests",
        out=out,
        WHEELHOUSE="none",
        BUDGET="300",
        TESTS_TIMEOUT="1",
    )
    assert done.returncode == 1, done.stderr
    plan = "plan (timeouts): lm 420 s, infer-lm 180 s, verify 240 s, tests 1 s, summary 30 s. "
    assert done.stdout.startswith(
        plan + "The call ends within 300 s (BUDGET), 871 s if no step is cut.\n"
    )
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    assert [s[:2] for s in steps] == [
        ["lm", "failed"], ["infer-lm", "skipped"], ["verify", "skipped"], ["tests", "timed out"],
    ]  # fmt: skip
    assert steps[-1][3:] == ["1", "stopped after 1 s"]
    summary = (out / "summary.md").read_text()
    assert "not measured: step lm failed: exit 2 (lm-results.json not written)" in summary
    assert (
        "not measured: step tests timed out: stopped after 1 s (tests.xml not written)" in summary
    )
    assert "no CUDA GPU on this machine" in (out / "gpu-check.log").read_text()


def test_every_command_of_a_whole_call_is_one_its_program_accepts(tmp_path, bench):
    """``DRY_RUN=1 ... all`` prints each step's command: aihpc's own parser takes the infer steps',
    gpu_fill.py's takes the runs', and the GPU tests are the files that hold them."""
    from aihpc.cli import build_parser

    done = gpu_check("all", out=tmp_path / "out", DRY_RUN="1", WHEELHOUSE="none")
    assert done.returncode == 0, done.stderr
    commands = [
        shlex.split(line.removeprefix("dry run: "))
        for line in done.stdout.splitlines()
        if line.startswith("dry run: ") and "aihpc verify" not in line
    ]
    programs = [c[1] if c[1] != "-m" else c[2] for c in commands]
    assert programs == [
        "benchmarks/gpu_fill.py",
        "aihpc",
        "benchmarks/gpu_fill.py",
        "aihpc",
        "pytest",
    ]
    lm, infer, fill, infer_lm, tests = commands
    for run in (lm, fill):
        args = bench("gpu_fill").parse_args(run[2:])
        assert args.report is None and args.minutes > 0
    assert bench("gpu_fill").parse_args(lm[2:]).task == "lm"
    for call in (infer, infer_lm):
        args = build_parser().parse_args(call[3:])
        assert args.command == "infer" and args.seconds == 5 and args.server_steps == 4
    assert build_parser().parse_args(infer[3:]).input == "3x224x224"
    files = [a for a in tests if a.startswith("tests/") and a.endswith(".py")]
    assert "tests/train/test_gpu.py" in files
    assert all("pytest.mark.gpu" in (ROOT / f).read_text() for f in files)
    steps = (tmp_path / "out" / "steps.tsv").read_text().splitlines()
    assert {step.split("\t")[0] for step in steps if step.startswith("verify-")} == {
        "verify-lm", "verify-fill", "verify-infer-resnet50", "verify-infer-lm",
    }  # fmt: skip
