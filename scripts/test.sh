#!/usr/bin/env bash
# Test command: makes sure the set-up is done (scripts/setup.sh), creates the upstream oracle
# environment (.venv-oracle, torch 2.13.0+cpu), then runs the whole test suite on the patched torch.
#   usage: scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p build
bash scripts/setup.sh > build/setup.log 2>&1 || { cat build/setup.log; exit 1; }
tail -n 1 build/setup.log
if ! .venv-oracle/bin/python -c 'import torch' 2>/dev/null; then
  echo "== creating .venv-oracle (torch 2.13.0+cpu, the upstream oracle)"
  python3 -m venv .venv-oracle
  .venv-oracle/bin/pip install -q torch==2.13.0 numpy pytest expecttest
fi
exec .venv/bin/python -m pytest -q "$@"
