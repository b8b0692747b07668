#!/usr/bin/env bash
# Set-up command: .venv at the repo root with torch (default 2.5.1), torch-overlay installed,
# the series applied, and the demo table printed. Safe to run again: it only does what is missing.
#   usage: scripts/setup.sh [--torch VERSION] [--download-only]
# --download-only downloads the release's wheels into build/downloads/VERSION and stops (.ci/run fetches the next
# release that way while the current one is tested); a later set-up installs from there.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version="${TORCH_VERSION:-2.5.1}"
download_only=
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_version="$2"; shift 2 ;;
    --download-only) download_only=1; shift ;;
    *) echo "usage: scripts/setup.sh [--torch VERSION] [--download-only]" >&2; exit 2 ;;
  esac
done

# The release's wheels (torch, its NVIDIA libraries: about 3-4 GB) and the test tools, downloaded whole before
# anything is installed; "done" marks a finished download, so an interrupted one is started again.
# PIP_CONSTRAINT=/dev/null: some machines cap torch with a pip constraint (at 2.14.1 here); the release asked for
# is the one to install. "===": the release's own build, never a local-label variant that pip would rank above it
# (2.13.0+cpu, where a machine offers one): no torchvision is built for those.
downloads="build/downloads/$torch_version"
download() {
  [ -f "$downloads.done" ] && return
  rm -rf "$downloads"
  mkdir -p "$downloads"
  PIP_CONSTRAINT=/dev/null python3 -m pip download -q -d "$downloads" "torch===$torch_version" numpy pytest expecttest
  touch "$downloads.done"
}
if [ -n "$download_only" ]; then
  download
  exit 0
fi

start=$SECONDS
installed=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ -n "$installed" ] && [ "$installed" != "$torch_version" ]; then
  # Another release, or a local-label build of this one (2.13.0+cpu): a new .venv, so nothing of the old one
  # (its NVIDIA packages: GBs) stays behind.
  echo "== removing .venv (torch $installed) for torch $torch_version"
  rm -rf .venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
if [ "$installed" != "$torch_version" ]; then
  echo "== installing torch $torch_version into .venv (the CUDA wheel: a few GB, a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  download
  # Each large wheel (the NVIDIA libraries, triton) alone, deleted once installed: the downloads and the installed
  # release are never on disk whole side by side (that peak, about 3 GB above the installed release, ran a CI
  # machine out of disk). Then torch and the rest, resolved against what is installed: pip checks every
  # dependency there.
  rm "$downloads.done"  # from here the downloads are incomplete: a set-up interrupted below downloads again
  find "$downloads" -name '*.whl' ! -name 'torch-*' -size +50M | sort | while read -r wheel; do
    .venv/bin/pip install -q --no-deps --no-index "$wheel"
    rm "$wheel"
  done
  PIP_CONSTRAINT=/dev/null .venv/bin/pip install -q --no-index --find-links "$downloads" "torch===$torch_version" numpy pytest expecttest
  mkdir -p build/wheels && mv "$downloads"/torch-"$torch_version"*.whl build/wheels/  # the tests read it
  rm -rf "$downloads"
fi
# pytest-xdist: scripts/test.sh runs the test files in parallel workers, one per core (at most 4)
.venv/bin/pip install -q pytest expecttest pytest-xdist==3.8.0

# Real model code for the no-annotation differential (test/differential/), pinned; the torch of .venv stays:
# the constraint pins it, and torchvision is the one built for this release.
case "$torch_version" in
  2.5.1) torchvision=0.20.1 ;; 2.6.0) torchvision=0.21.0 ;; 2.7.1) torchvision=0.22.1 ;; 2.8.0) torchvision=0.23.0 ;;
  2.9.1) torchvision=0.24.1 ;; 2.10.0) torchvision=0.25.0 ;; 2.11.0) torchvision=0.26.0 ;; 2.12.1) torchvision=0.27.1 ;;
  2.13.0) torchvision=0.28.0 ;; 2.14.1) torchvision=0.29.1 ;;
  2.15.0) torchvision=0.29.2 ;;  # the registry has none built for 2.15; 0.29.2 declares torch>=2.14.0
  *) torchvision= ;;
esac
models="transformers==4.51.3 timm==1.0.15${torchvision:+ torchvision==$torchvision}"
if ! .venv/bin/python -c "import importlib.metadata as m, sys
want = dict(p.split('==') for p in sys.argv[1:])
sys.exit(any(m.version(k) != v for k, v in want.items()))" $models 2>/dev/null; then
  echo "== installing $models"
  installed_torch=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))')
  mkdir -p build && echo "torch==$installed_torch" > build/torch-pin.txt
  PIP_CONSTRAINT=/dev/null .venv/bin/pip install -q -c build/torch-pin.txt $models
fi
.venv/bin/pip install -q --no-deps -e .

echo "== torch-overlay apply"
.venv/bin/torch-overlay apply
echo "== torch-overlay status"
.venv/bin/torch-overlay status
echo "== torch-overlay demo"
.venv/bin/torch-overlay demo
echo "== set-up done in $((SECONDS - start)) s"
