#!/usr/bin/env bash
# The GPU measurements issues ask for, on a GPU node without network; several steps run in one
# call, one after another (output to $OUT, or ./gpu-check):
#
#   benchmarks/gpu_check.sh tests     install offline, then the GPU tests and the energy tests  (about 4 min)
#   benchmarks/gpu_check.sh fill      install offline, then gpu_fill.py for 5 minutes: share of the measured
#                                     and nominal bf16 peak, busy fraction, harness overhead, kernels by type
#   benchmarks/gpu_check.sh compile   the same with regional compilation on (--compile: batch norm, ReLU and
#                                     the residual add fused, a child's unchanged blocks from the cache)
#   benchmarks/gpu_check.sh stream    the same with the data streamed (--staging stream)       (about 8 min)
#   benchmarks/gpu_check.sh lm        the language task (--task lm) on 16 M synthetic tokens (its GPU default,
#                                     64 M, takes minutes of the node's CPU to generate): share of the
#                                     peak, model FLOPs utilisation, busy fraction, energy
#
#   benchmarks/gpu_check.sh infer     aihpc infer on a zoo ResNet-50 at 3x128x128 in bf16 (offline, single-stream,
#                                     the server's rate within MLPerf's 15 ms): the share of the peak, energy
#
#   e.g. MINUTES=1.5 benchmarks/gpu_check.sh fill compile lm
#
# `fill` is the "before" of issue 30's fusion, `compile` the "after".  With 15 device-minutes for all
# tries, `MINUTES=1.5 ... fill compile lm` fits in one call with the machine's start.
#
# The call first installs aihpc from the wheelhouse $WHEELHOUSE (default .whl)
# with `make install-offline`, into the node's own Python environment, keeping
# its CUDA build of torch: the path README's "On compute nodes without network
# access" describes.  The wheelhouse needs only what the node lacks: make it on a
# machine with network with `make wheelhouse WHEELHOUSE=.whl PY_VERSION=3.12
# PLATFORM=manylinux_2_28_x86_64`, then delete the wheels of packages the node
# already has (its `pip list`), to keep what travels small.
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: benchmarks/gpu_check.sh STEP...  (tests, fill, compile, stream, lm, infer)" >&2; exit 2; }
for step in "$@"; do
  case "$step" in tests|fill|compile|stream|lm|infer) ;;
    *) echo "gpu_check: a step is tests, fill, compile, stream, lm or infer, got '$step'" >&2; exit 2 ;;
  esac
done
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log() { tee -a "$out/gpu-check.log"; }

make install-offline WHEELHOUSE="${WHEELHOUSE:-.whl}" PYTHON="${PYTHON:-python3}" EXTRAS=infer 2>&1 | log || exit 1
python3 -c "import aihpc, torch; print('aihpc', aihpc.__file__, 'torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | log
nvidia-smi --query-gpu=name,power.draw,clocks.sm,temperature.gpu --format=csv 2>&1 | log
lm_config=$(mktemp -d)/lm.toml
printf 'task = "lm"\n[data_options]\ntrain_tokens = 16777216\n' > "$lm_config"
for step in "$@"; do
  echo "== $step  $(date -u +%H:%M:%S)" | log
  case "$step" in
    tests)
      python3 -m pytest -m gpu tests/train/test_gpu.py tests/nas/test_lm_spec.py -p no:cacheprovider -q 2>&1 | log
      python3 -m pytest tests/energy -p no:cacheprovider -q 2>&1 | log
      continue ;;
    infer)
      python3 -m aihpc infer --model resnet50 --input 3x128x128 --samples 1024 --seconds 5 --server-steps 5 \
        --out "$(mktemp -d)/r50" --json > "$out/infer-resnet50.json" 2> >(log) ; tail -c 2000 "$out/infer-resnet50.json" | log
      continue ;;
    fill) args=() ;;
    compile) args=(-- --compile) ;;
    stream) args=(--no-profile -- --staging stream) ;;
    lm) args=(--no-profile -- --config "$lm_config") ;;
  esac
  # the run directory stays on the node (its weight files are large); its results.json comes back
  run=$(mktemp -d)/run
  (cd benchmarks && python3 gpu_fill.py --minutes "${MINUTES:-5}" --keep "$run" "${args[@]}") 2>&1 | log
  cp "$run/results.json" "$out/$step-results.json"
done
