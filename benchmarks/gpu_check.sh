#!/usr/bin/env bash
# The GPU measurements issues ask for, on one GPU node without network, in one call: aihpc is
# installed from a carried wheelhouse, the steps run one after another, each under a timeout, and
# a summary of every figure is written to $OUT/summary.md (Markdown) and printed.
#
#   benchmarks/gpu_check.sh all         lm infer fill infer-lm verify tests, then the summary
#   benchmarks/gpu_check.sh STEP...     the steps named, in that order, then the summary
#
# verify just before tests runs beside them (it uses the CPU only; the tests are not timed).
#
# Steps (their files go to $OUT, default gpu-check in the current folder; run directories stay
# on the node, in a temporary folder removed at the end):
#   lm         gpu_fill.py --task lm: a language run of LM_MINUTES on LM_TOKENS synthetic tokens,
#              then a profiled epoch of the language seed (kernel time by group)
#   fill       gpu_fill.py: the default image run, IMAGE_MINUTES (profiled where PROFILE_IMAGE=1)
#   compile    the image run with regional compilation on (-- --compile)
#   stream     the image run with the data streamed (-- --staging stream)
#   lm-step    lm_step.py: the language seed's training step eager, eager on bfloat16 weights and
#              compiled block by block on them (LM_STEP_SECONDS each), kernel time by kind
#   infer      aihpc infer on a zoo ResNet-50 at 3x224x224, all three scenarios
#   infer-lm   aihpc infer on the best trial of this call's language run (name lm before it)
#   verify     aihpc verify of every run and inference this call made
#   tests      the GPU tests: pytest -m gpu on the test files that hold them (gpu_fill.py's own
#              test left out where this call runs lm or fill, which run it at full size)
#   summary    benchmarks/gpu_summary.py $OUT (always run last; alone, it rewrites the summary)
#
# Durations, from the environment (positive numbers):
#   LM_MINUTES=3  IMAGE_MINUTES=2   the runs' clocks (MINUTES sets both)
#   LM_TOKENS=16777216              the language's training tokens (its GPU default, 64 M, takes
#                                   minutes of the node's CPU to generate)
#   LM_STEP_SECONDS=8               timed steps of each variant of lm-step
#   LM_STEP_VARIANTS=eager,eager-bf16,compiled-bf16   the variants lm-step times
#   LM_PROFILE=1                    0: the lm step does not profile the seed (lm-step profiles
#                                   each variant's kernels)
#   INFER_SECONDS=5  SERVER_STEPS=4 LoadGen's least duration of each test; the server's rate search
#   TESTS_TIMEOUT=300               seconds the GPU tests may take
#   BUDGET=540                      seconds for the whole call: each step's timeout is cut to what is
#                                   left of it less the summary's 30 s, and a step with less than it
#                                   needs left is skipped (the summary says so)
# DRY_RUN=1 prints each step's command ("dry run: ...") instead of running it, and installs nothing.
# e.g. LM_MINUTES=1.5 IMAGE_MINUTES=1 INFER_SECONDS=3 SERVER_STEPS=3 TESTS_TIMEOUT=120 BUDGET=430 \
#      benchmarks/gpu_check.sh all
#
# The wheelhouse $WHEELHOUSE (default .whl) needs only what the node lacks: make it on a machine
# with network, `make wheelhouse WHEELHOUSE=.whl PY_VERSION=3.12 PLATFORM=manylinux_2_28_x86_64
# EXTRAS=infer`, then delete the wheels of packages the node already has (its `pip list`).  It is
# installed with `make install-offline` into the node's Python ($PYTHON, default python3),
# keeping its CUDA build of torch.  WHEELHOUSE=none skips the install and uses the aihpc that
# Python already has.  Bad steps or settings: one line, exit 2, nothing run.  Exit 1 where a step
# failed or was stopped (the summary says which), 0 where all ran.
set -uo pipefail

STEPS="lm lm-step fill compile stream infer infer-lm verify tests summary"
ALL="lm infer fill infer-lm verify tests"
die() { echo "gpu_check: $*" >&2; exit 2; }
[ $# -gt 0 ] || die "name the steps to run: all, or some of ${STEPS// /, }"
if [ "$*" = all ]; then set -- $ALL; fi
for step in "$@"; do
  case " $STEPS " in *" $step "*) ;;
    *) [ "$step" = all ] && die "all runs every step: name all alone, or the steps"
       die "a step is all or one of ${STEPS// /, }, got '$step'" ;;
  esac
done
STEP_LIST="$*"
has() { case " $STEP_LIST " in *" $1 "*) return 0 ;; esac; return 1; }  # has STEP: this call runs STEP
case " $STEP_LIST " in *" infer-lm "*)
  case " ${STEP_LIST%%infer-lm*} " in *" lm "*) ;; *) die "infer-lm serves the best trial of this call's language run: name lm before it" ;; esac ;;
esac

number() {  # number NAME DEFAULT: the environment's NAME, a positive number, else DEFAULT
  local value=${!1:-$2}
  [[ $value =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN{exit !($value > 0)}" || die "$1 must be a positive number, got '$value'"
  echo "$value"
}
LM_MINUTES=$(number LM_MINUTES "${MINUTES:-3}") || exit 2
IMAGE_MINUTES=$(number IMAGE_MINUTES "${MINUTES:-2}") || exit 2
LM_TOKENS=$(number LM_TOKENS 16777216) || exit 2
LM_STEP_SECONDS=$(number LM_STEP_SECONDS 8) || exit 2
INFER_SECONDS=$(number INFER_SECONDS 5) || exit 2
SERVER_STEPS=$(number SERVER_STEPS 4) || exit 2
TESTS_TIMEOUT=$(number TESTS_TIMEOUT 300) || exit 2
BUDGET=$(number BUDGET 540) || exit 2
secs() { awk "BEGIN{s = int($1 + 0.5); print s < 1 ? 1 : s}"; }  # secs EXPR: its value rounded, at least 1

out=$(realpath -m "${OUT:-gpu-check}")
wheelhouse=${WHEELHOUSE:-.whl}
[ "$wheelhouse" = none ] || wheelhouse=$(realpath -m "$wheelhouse")
mkdir -p "$out" || die "cannot make the output folder $out"
cd "$(dirname "$0")/.." || die "cannot enter the repository"
work=$(mktemp -d) || die "cannot make a temporary folder"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
start=$(date +%s)
deadline=$(( start + $(secs "$BUDGET") - 30 ))  # the summary's 30 s kept back
log() { tee -a "$out/gpu-check.log"; }
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$out/steps.tsv"; }

# step NAME TIMEOUT LEAST COMMAND...: COMMAND under TIMEOUT seconds, cut to what is left of the
# budget; skipped when less than LEAST seconds are left.  Recorded in steps.tsv; its exit status.
step() {
  local name=$1 want=$2 least=$3; shift 3
  local left=$(( deadline - $(date +%s) ))
  if (( left < least )); then
    record "$name" skipped 0 "$want" "$left s of the budget left, it needs $least"
    echo "== $name  skipped: $left s of the budget left, it needs $least" | log
    return 1
  fi
  local limit=$(( want < left ? want : left )) t0=$(date +%s)
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "dry run: $*" | log
    record "$name" "dry run" 0 "$limit" ""
    return 0
  fi
  echo "== $name  $(date -u +%H:%M:%S)  (timeout $limit s)" | log
  timeout -k 20 "$limit" "$@" 2>&1 | log
  local rc=${PIPESTATUS[0]} took=$(( $(date +%s) - t0 ))
  if (( rc == 0 )); then
    record "$name" ok "$took" "$limit" ""
  elif (( rc == 124 || (rc == 137 && took >= limit) )); then  # timeout's TERM, or its KILL 20 s on
    record "$name" "timed out" "$took" "$limit" "stopped after $limit s"
  else
    record "$name" failed "$took" "$limit" "exit $rc"
  fi
  return "$rc"
}

run_seconds() { secs "$1 * 60"; }
plan() {  # plan STEP...: the timeout of each step, printed before the call starts
  local total=30 line="plan (timeouts):" s t
  [ "$wheelhouse" = none ] || { total=$(( total + 180 )); line+=" install 180 s,"; }
  for s in "$@"; do
    [ "$s" = summary ] && continue
    t=$(timeout_of "$s"); total=$(( total + t )); line+=" $s $t s,"
  done
  echo "$line summary 30 s. The call ends within $(secs "$BUDGET") s (BUDGET), $total s if no step is cut."
}
timeout_of() {
  case $1 in
    lm) echo $(( $(run_seconds "$LM_MINUTES") + 240 )) ;;  # start, the tokens, the peak, the profile
    fill|stream) echo $(( $(run_seconds "$IMAGE_MINUTES") + 180 )) ;;
    compile) echo $(( $(run_seconds "$IMAGE_MINUTES") + 300 )) ;;
    lm-step) secs "3 * ($LM_STEP_SECONDS + 60) + 60" ;;  # three variants: start, compile, children
    infer|infer-lm) secs "2 * $INFER_SECONDS * ($SERVER_STEPS + 2) + 120" ;;
    verify) echo 240 ;;
    tests) secs "$TESTS_TIMEOUT" ;;
    summary) echo 30 ;;
  esac
}

run_step() {  # run_step NAME: the step's commands
  local s=$1
  case $s in
    lm)
      local lm_profile=(--profile-out "$out/lm-profile.json")
      [ "${LM_PROFILE:-1}" = 0 ] && lm_profile=(--no-profile)
      step lm "$(timeout_of lm)" "$(( $(run_seconds "$LM_MINUTES") + 60 ))" "$PY" benchmarks/gpu_fill.py \
        --task lm --minutes "$LM_MINUTES" --samples "$(secs "$LM_TOKENS")" --keep "$work/lm" "${lm_profile[@]}"
      cp "$work/lm/results.json" "$out/lm-results.json" 2>/dev/null ;;
    lm-step)
      step lm-step "$(timeout_of lm-step)" 90 "$PY" benchmarks/lm_step.py --device cuda \
        --variants "${LM_STEP_VARIANTS:-eager,eager-bf16,compiled-bf16}" --seconds "$LM_STEP_SECONDS" --out "$out/lm-step.json" ;;
    fill|compile|stream)
      local args=() profile=(--no-profile)
      [ "$s" = compile ] && args=(-- --compile)
      [ "$s" = stream ] && args=(-- --staging stream)
      [ "${PROFILE_IMAGE:-0}" = 1 ] && profile=(--profile-out "$out/$s-profile.json")
      step "$s" "$(timeout_of "$s")" "$(( $(run_seconds "$IMAGE_MINUTES") + 60 ))" "$PY" benchmarks/gpu_fill.py \
        --minutes "$IMAGE_MINUTES" --keep "$work/$s" "${profile[@]}" "${args[@]}"
      cp "$work/$s/results.json" "$out/$s-results.json" 2>/dev/null ;;
    infer|infer-lm)
      local what=(--model resnet50 --input 3x224x224) name=infer-resnet50
      [ "$s" = infer-lm ] && what=("$work/lm") name=infer-lm
      if [ "$s" = infer-lm ] && [ ! -f "$work/lm/results.json" ] && [ "${DRY_RUN:-0}" != 1 ]; then
        record infer-lm skipped 0 0 "the language run left no results"; return
      fi
      step "$s" "$(timeout_of "$s")" 60 "$PY" -m aihpc infer "${what[@]}" --seconds "$INFER_SECONDS" \
        --server-steps "$(secs "$SERVER_STEPS")" --out "$work/$name"
      cp "$work/$name/infer.json" "$out/$name.json" 2>/dev/null ;;
    verify)
      local name made=0
      for name in lm fill compile stream infer-resnet50 infer-lm; do
        if [ "${DRY_RUN:-0}" = 1 ]; then has "${name/infer-resnet50/infer}" || continue  # its step's
        else [ -d "$work/$name" ] || continue; fi
        made=1
        step "verify-$name" 120 20 bash -c '"$0" -m aihpc verify --json "$1" > "$2"' "$PY" "$work/$name" "$out/verify-$name.json"
      done
      (( made )) || record verify skipped 0 0 "no run or inference in this call to verify" ;;
    tests)
      local files deselect=()
      files=$(grep -rl --include='test_*.py' 'pytest.mark.gpu' tests | sort)
      if has lm || has fill; then deselect=(--deselect tests/train/test_gpu.py::test_gpu_fill_prints_its_figures); fi
      # shellcheck disable=SC2086  # the files, one word each
      step tests "$(timeout_of tests)" 60 "$PY" -m pytest -m gpu $files "${deselect[@]}" -p no:cacheprovider -q \
        --junitxml "$out/tests.xml" ;;
    summary) ;;
  esac
}

steps=("$@")
[ "${steps[-1]}" = summary ] || steps+=(summary)
needs_install=0
for s in "${steps[@]}"; do [ "$s" = summary ] || needs_install=1; done
if (( needs_install )); then
  rm -f "$out/steps.tsv"  # this call's steps only
  plan "$@" | log
  if [ "$wheelhouse" != none ] && [ "${DRY_RUN:-0}" != 1 ]; then
    step install 180 30 make install-offline WHEELHOUSE="$wheelhouse" PYTHON="$PY" EXTRAS=infer || die "the install failed (above); nothing measured"
  fi
  "$PY" -c "import aihpc" 2>/dev/null || PY=.venv/bin/python  # a Python outside a venv installs into .venv
  [ "${DRY_RUN:-0}" = 1 ] || { timeout 60 "$PY" -c "import aihpc, torch; print(f'{torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"no CUDA device\"}, torch {torch.__version__}, aihpc {aihpc.__version__}')" 2>&1
    ! command -v nvidia-smi >/dev/null || timeout 20 nvidia-smi --query-gpu=name,power.draw,clocks.sm,temperature.gpu --format=csv,noheader 2>&1 | head -1
  } | tee "$out/device.txt" | log
fi
verifying=
for (( i = 0; i < ${#steps[@]}; i++ )); do
  s=${steps[i]}
  if [ "$s" = verify ] && [ "${steps[i + 1]:-}" = tests ]; then
    run_step verify & verifying=$!
  elif [ "$s" != summary ]; then
    run_step "$s"
  fi
done
[ -z "$verifying" ] || wait "$verifying"
"$PY" benchmarks/gpu_summary.py "$out" || exit 2
rm -rf "$work"
# exit 1 where a step of this call failed or was stopped
if (( needs_install )) && grep -qE $'\t(failed|timed out)\t' "$out/steps.tsv"; then exit 1; fi

