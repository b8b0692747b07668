#!/usr/bin/env bash
# Set-up command: .venv at the repo root with torch (default 2.5.1), torch-overlay installed,
# the series applied, and the demo table printed. Safe to run again: it only does what is missing.
#   usage: scripts/setup.sh [--torch VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version="${TORCH_VERSION:-2.5.1}"
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_version="$2"; shift 2 ;;
    *) echo "usage: scripts/setup.sh [--torch VERSION]" >&2; exit 2 ;;
  esac
done

start=$SECONDS
installed=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ -n "$installed" ] && [ "${installed%%+*}" != "$torch_version" ]; then
  # Another release: a new .venv, so nothing of the old one (its NVIDIA packages: GBs) stays behind.
  echo "== removing .venv (torch $installed) for torch $torch_version"
  rm -rf .venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
if [ "${installed%%+*}" != "$torch_version" ]; then
  echo "== installing torch $torch_version into .venv (the CUDA wheel: a few GB, a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  # PIP_CONSTRAINT=/dev/null: some machines cap torch with a pip constraint (at 2.14.1 here); the release
  # asked for is the one to install.
  PIP_CONSTRAINT=/dev/null .venv/bin/pip install -q "torch==$torch_version" numpy
fi
.venv/bin/pip install -q pytest expecttest
.venv/bin/pip install -q --no-deps -e .

echo "== torch-overlay apply"
.venv/bin/torch-overlay apply
echo "== torch-overlay status"
.venv/bin/torch-overlay status
echo "== torch-overlay demo"
.venv/bin/torch-overlay demo
echo "== set-up done in $((SECONDS - start)) s"
