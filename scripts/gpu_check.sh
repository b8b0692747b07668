#!/usr/bin/env bash
# The one GPU check (issue 34): Triton kernels under torch._inductor.config.kernel_annotations, and
# flex_attention's backward, which torch >= 2.11 refuses on CPU. CI never runs it (CI has no GPU).
#
# Made for the GPU machine a session may be lent: its python3 holds torch 2.11.0+cu130 and reaches no package
# registry, so the series is applied to that torch with the tool of this working tree, and expecttest (the one
# test dependency missing there) travels as a wheel in .whl/. Runs in about 5 minutes on an H100/H200:
#   1. bench/gpu_kernel_annotations.py on the pristine torch (its output code kept);
#   2. `torch-overlay apply`, then the same script: flag off must give the pristine output code byte for byte,
#      flag on must name every region in the output code and the profiler (CPU scopes and GPU spans);
#   3. the demo and the tests that need flex_attention's backward, plus the Inductor annotation tests;
#   4. `torch-overlay revert`: the torch is the release's again.
# Usage (on the GPU machine, from the repository root): bash scripts/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-build/gpu-check}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()
step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, its output in $out/NAME.log, its tail here
  local name="$1" limit="$2"; shift 2
  echo "== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 124 ] && sleep 5  # timeout signalled the step's process group: let its processes end
  tail -n 25 "$out/$name.log"
  echo "== $name: rc $rc in $((SECONDS - start)) s"
  [ "$rc" = 0 ] || failed+=("$name")
}
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
step pristine 120 python3 bench/gpu_kernel_annotations.py --save "$out/pristine.json"
step apply 60 python3 -m torch_overlay apply
step patched 150 python3 bench/gpu_kernel_annotations.py --pristine "$out/pristine.json" --code-dir "$out"
step demo 45 python3 -m torch_overlay demo
step tests 200 python3 -m pytest -q -n 8 --dist loadfile test/functorch/test_aot_fw_bw_annotations.py \
  test/inductor/test_kernel_annotations.py test/inductor/test_eager_annotation_scopes.py
step revert 45 python3 -m torch_overlay revert
python3 -m torch_overlay status 2>&1 | grep -E "^(torch|applied)"
rm -f "$out/pristine.json"  # large (every output code); the logs say what it held
echo "== failed steps: ${failed[*]:-none}"
[ "${#failed[@]}" = 0 ]
