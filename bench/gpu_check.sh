#!/usr/bin/env bash
# make gpu-check: everything that needs a CUDA GPU, in one run that fits in 10 minutes on one
# H100/H200 (the device tool's per-call limit).  Writes into bench/results/:
#   gpu_tests.txt            the CUDA cases of the unit tests (they skip on a CPU-only machine)
#   attention_cuda.{json,md} bench/bench_attention.py --device cuda (T = 128 .. 16384)
#   triton_cuda.{json,md}    bench/bench_triton.py (the FlashAttention kernel against PyTorch)
#   gpu_check.txt            nvidia-smi, versions and the wall time of each step
# Usage: make gpu-check   (after `make setup` with a CUDA build of torch: TORCH=torch==2.13.0 TORCH_INDEX=)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=bench/results
log=$OUT/gpu_check.txt
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
} > "$log"
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "no CUDA device: nothing to do (see $log)"; exit 1; }
rc=0
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@"; local s=$?
  echo "$name: exit $s, $(( $(date +%s) - t0 )) s" >> "$log"
  [ $s -eq 0 ] || rc=1
}
# gpu_tests.txt: its first line says when it ran, its second the GPU, its last pytest's summary
# (bench/readme_figures.py quotes them)
{ date -u +"run %Y-%m-%d %H:%M UTC by make gpu-check"
  nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1
  $PY -c "import torch; print('torch', torch.__version__)"; } > "$OUT/gpu_tests.txt"
step "CUDA unit tests" 150 env HF_HUB_OFFLINE=1 $PY -m pytest -q -rs -m "not book" -k cuda \
  tests/test_attention.py tests/test_tiled.py tests/test_multihead.py tests/test_kv_cache.py \
  tests/test_triton_attention.py tests/test_softmax.py tests/test_masks.py tests/test_geometry.py \
  tests/test_graphs.py tests/test_measures.py tests/test_validate.py tests/test_views.py >> "$OUT/gpu_tests.txt" 2>&1
step "bench_attention --device cuda" 200 $PY bench/bench_attention.py --device cuda --budget 0.5 \
  --note "make gpu-check"
step "bench_triton" 200 $PY bench/bench_triton.py --budget 1.0 --repeats 5
cat "$log"
exit $rc
