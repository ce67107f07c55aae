#!/usr/bin/env bash
# The corpus checked on an accelerator's real devices (`check --platform`), original against
# the --style global migration on the same JAX (there is no legacy JAX there).
# usage: benchmarks/on_accelerator.sh PLATFORM DEVICES OUT_DIR [corpus|real [ENTRY...]]
# (each entry starts the accelerator's runtime twice, about 30 s a program on a TPU v5e)
# Where the machine has no package index, put the transform's pure dependencies on
# PYTHONPATH first (pip install --target DIR libcst typer rich pathspec packaging, here).
set -uo pipefail
platform=$1 devices=$2 out=$3 which=${4:-corpus}
shift 4 2>/dev/null || shift $#
cd "$(dirname "$0")/.."
mkdir -p "$out"
entries=()
root=corpus
[ "$which" = corpus ] || root=corpus/real
for entry in "$@"; do entries+=(--entry "$entry"); done
if [ ${#entries[@]} -gt 0 ]; then
  :
elif [ "$which" = corpus ]; then
  root=corpus
  for program in corpus/*.py; do entries+=(--entry "$(basename "$program" .py):run"); done
else
  root=corpus/real
  for program in corpus/real/*.py; do
    name=$(basename "$program" .py)
    [ "$name" = pmap_in_pmap_grad ] || entries+=(--entry "$name:run")
  done
  for main in corpus/real/*/main.py; do
    entries+=(--entry "$(basename "$(dirname "$main")").main:run")
  done
fi
python3 -m migrator.cli check "$root" --style global "${entries[@]}" --platform "$platform" \
  --devices "$devices" --repeat 1 --timeout 240 --report-json "$out/check-$which.json" \
  > "$out/check-$which.txt" 2>&1
echo "check exit $?"
tail -4 "$out/check-$which.txt"
