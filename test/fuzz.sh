#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (default 10s).
# `make test` runs them briefly; `make fuzz` runs them for minutes. A target
# that finds a failure writes its input under the package's testdata/fuzz/
# and this script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
mapfile -t files < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' || true)
if [ ${#files[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
n=0
for f in "${files[@]}"; do
  dir=./$(dirname "$f")
  for name in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
    echo "fuzz: $dir $name for $FUZZTIME"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$dir"
    n=$((n + 1))
  done
done
echo "fuzz: $n targets passed"
