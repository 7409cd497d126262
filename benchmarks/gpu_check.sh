#!/usr/bin/env bash
# The GPU measurements issues ask for, one step per call on a GPU node without network
# (each step fits a 10-minute slot; output to $OUT, or ./gpu-check):
#
#   benchmarks/gpu_check.sh tests     install offline, then the GPU tests and the energy tests  (about 4 min)
#   benchmarks/gpu_check.sh fill      install offline, then gpu_fill.py for 5 minutes: share of the measured
#                                     and nominal bf16 peak, busy fraction, harness overhead, kernels by type
#   benchmarks/gpu_check.sh compile   the same with regional compilation on (--compile: batch norm, ReLU and
#                                     the residual add fused, a child's unchanged blocks from the cache)
#   benchmarks/gpu_check.sh stream    the same with the data streamed (--staging stream)       (about 8 min)
#
# With 15 device-minutes for all tries, `fill` and `compile` each with MINUTES=4 (the run's length) fit
# together with the install; `fill` is the "before" of issue 30's fusion, `compile` the "after".
#
# Every step first installs aihpc from the wheelhouse $WHEELHOUSE (default .whl)
# with `make install-offline`, into the node's own Python environment, keeping
# its CUDA build of torch: the path README's "On compute nodes without network
# access" describes.  The wheelhouse needs only what the node lacks: make it on a
# machine with network with `make wheelhouse WHEELHOUSE=.whl PY_VERSION=3.12
# PLATFORM=manylinux_2_28_x86_64`, then delete the wheels of packages the node
# already has (its `pip list`), to keep what travels small.
set -uo pipefail
step=${1:?"usage: benchmarks/gpu_check.sh tests|fill|compile|stream"}
out=${OUT:-gpu-check}
case "$step" in
  tests|fill) args=() ;;
  compile) args=(-- --compile) ;;
  stream) args=(--no-profile -- --staging stream) ;;
  *) echo "gpu_check: step must be tests, fill, compile or stream, got '$step'" >&2; exit 2 ;;
esac
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log() { tee -a "$out/$step.log"; }

make install-offline WHEELHOUSE="${WHEELHOUSE:-.whl}" PYTHON="${PYTHON:-python3}" 2>&1 | log || exit 1
python3 -c "import aihpc, torch; print('aihpc', aihpc.__file__, 'torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | log
nvidia-smi --query-gpu=name,power.draw,clocks.sm,temperature.gpu --format=csv 2>&1 | log
if [ "$step" = tests ]; then
  python3 -m pytest -m gpu tests/train/test_gpu.py -p no:cacheprovider -q 2>&1 | log
  python3 -m pytest tests/energy -p no:cacheprovider -q 2>&1 | log
else
  # the run directory stays on the node (its weight files are large); its results.json comes back
  run=$(mktemp -d)/run
  (cd benchmarks && python3 gpu_fill.py --minutes "${MINUTES:-5}" --keep "$run" "${args[@]}") 2>&1 | log
  cp "$run/results.json" "$out/$step-results.json"
fi
