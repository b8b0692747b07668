#!/usr/bin/env bash
# Test command: makes sure the set-up is done (scripts/setup.sh) for the release under test, creates the
# upstream oracle environment (.venv-oracle, torch 2.13.0+cpu), then runs the test suite on the patched torch.
#   usage: scripts/test.sh [--torch VERSION] [--no-setup] [pytest arguments]
# The test files run in parallel (pytest-xdist, a whole file per worker: a file's class fixtures are built
# once); TEST_WORKERS sets the number of workers, default one per core and at most 4; 0 runs in one process.
# The release is --torch, else $TORCH_VERSION, else 2.5.1 (as for scripts/setup.sh). --no-setup: the caller ran
# scripts/setup.sh for that release already (.ci/run, which downloads the next release once this one is set up).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/test.sh [--torch VERSION] [--no-setup] [pytest arguments]"
torch_version="${TORCH_VERSION:-2.5.1}"
setup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; torch_version="$2"; shift 2 ;;
    --no-setup) setup=; shift ;;
    *) break ;;
  esac
done

mkdir -p build
if [ -n "$setup" ]; then
  bash scripts/setup.sh --torch "$torch_version" > build/setup.log 2>&1 || { cat build/setup.log; exit 1; }
  tail -n 1 build/setup.log
else
  installed=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
  if [ "$installed" != "$torch_version" ]; then
    echo "scripts/test.sh --no-setup: .venv holds torch ${installed:-none}, not $torch_version; nothing was run." \
         "Run scripts/setup.sh --torch $torch_version first, or leave out --no-setup." >&2
    exit 2
  fi
fi
if ! .venv-oracle/bin/python -c 'import torch' 2>/dev/null; then
  echo "== creating .venv-oracle (torch 2.13.0+cpu, the upstream oracle)"
  python3 -m venv .venv-oracle
  .venv-oracle/bin/pip install -q torch==2.13.0 numpy pytest expecttest
fi
if ! .venv-oracle/bin/python -c 'import transformers' 2>/dev/null; then
  # The annotated HF model programs of test/fuzz/fuzz_models.py, run on both sides; torch stays 2.13.0+cpu.
  .venv-oracle/bin/pip install -q -c <(echo torch==2.13.0) transformers==4.51.3
fi
if ! command -v chromium > /dev/null; then
  # The report test loads the page in headless Chromium (Debian's chromium); it fails, not skips, without it.
  echo "== installing Debian's chromium (the report test's browser)"
  { apt-get install -y -q chromium > build/chromium-install.log 2>&1 \
    || { apt-get update -q && apt-get install -y -q chromium; } >> build/chromium-install.log 2>&1; } \
    || echo "== could not install chromium (see build/chromium-install.log; needs root): the report's browser test will fail"
fi
workers="${TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
# Several tests write a torch wheel or a venv under /tmp (pytest's tmp_path): say how much room there is, so a
# "No space left on device" in a log can be read against it.
echo "== free disk: $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -n 1 | tr -d ' ') in ${TMPDIR:-/tmp}, $(df -h --output=avail . | tail -n 1 | tr -d ' ') in $(pwd)"
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@"
