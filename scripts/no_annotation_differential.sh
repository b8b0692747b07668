#!/usr/bin/env bash
# The whole no-annotation differential corpus on one release: pristine vs patched torch of that release
# (test/differential/). Writes bench/no-annotation-differential-<release>.md.
#   usage: scripts/no_annotation_differential.sh [--torch VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/no_annotation_differential.sh [--torch VERSION]"
torch_version="${TORCH_VERSION:-2.5.1}"
case "$#:${1:-}" in
  0:) ;;
  2:--torch) torch_version="$2" ;;
  *:-h|*:--help) echo "$usage"; exit 0 ;;
  *) echo "no_annotation_differential.sh: unexpected arguments: $* (nothing was set up or run)" >&2
     echo "$usage" >&2; exit 2 ;;
esac
mkdir -p build
bash scripts/setup.sh --torch "$torch_version" > build/setup.log 2>&1 || { cat build/setup.log; exit 1; }
exec .venv/bin/python test/differential/differential_run.py --all \
  --out "bench/no-annotation-differential-$torch_version.md"
