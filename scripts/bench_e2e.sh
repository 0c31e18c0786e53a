#!/usr/bin/env bash
# The end-to-end benchmark in one device call: install the gpurig bundle, patch SGLang for DDTREE,
# train the pair first if $PAIR has none (a cold machine: ~4 min of the call), then
# scripts/bench_e2e.py with a deadline that leaves time to write the report. Results in $OUT/bench
# (benchmarks.md, PNGs, results.json), engine logs in $OUT/bench-logs.tgz.
# usage: RIG=/path/to/.gpurig bash scripts/bench_e2e.sh [bench_e2e.py options]
#   BUDGET_S: the whole call's seconds (default 360, or 540 when the pair must be trained first);
#   the benchmark's --deadline-s is what is left of it after setup, less 25 s for the report.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RIG=${RIG:-$REPO/.gpurig} OUT=${OUT:-/tmp/out} PAIR=${PAIR:-/tmp/trained-pair} SITE=/tmp/site PY=python3
if [ -f "$PAIR/manifest.json" ]; then BUDGET_S=${BUDGET_S:-360}; else BUDGET_S=${BUDGET_S:-540}; fi
t0=$(date +%s)
mkdir -p "$OUT" /tmp/tvm-ffi-cache ~/.triton/cache
[ -d "$RIG/jitcache" ] && cp -rn "$RIG"/jitcache/. /tmp/tvm-ffi-cache/ 2>/dev/null
[ -f "$RIG/jitcache.tgz" ] && tar xzf "$RIG/jitcache.tgz" -C /tmp/tvm-ffi-cache 2>/dev/null
[ -f "$RIG/tritoncache.tgz" ] && tar xzf "$RIG/tritoncache.tgz" -C ~/.triton/cache 2>/dev/null
rm -rf "$SITE"  # a warm machine keeps the last call's patched install: start from the pristine bundle
# shellcheck source=/dev/null
source "$RIG/scripts/env.sh" || { echo "bundle install failed"; exit 1; }
cd "$REPO" || exit 1
python3 -m ddtree_patch apply --target "$SITE" > "$OUT/apply.log" 2>&1 \
  || { echo "[apply] failed:"; tail -5 "$OUT/apply.log"; exit 1; }
echo "[apply] OK"
if [ ! -f "$PAIR/manifest.json" ]; then
  echo "[train] no pair at $PAIR: training it first"
  python3 scripts/train_pair.py "$PAIR"
  [ -f "$PAIR/manifest.json" ] || { echo "[train] FAILED, no pair written"; exit 1; }
  cp -r "$PAIR" "$OUT/trained-pair"
fi
left=$(( BUDGET_S - ($(date +%s) - t0) - 25 ))
echo "[setup] $(( $(date +%s) - t0 ))s; benchmark deadline ${left}s"
BENCH_COMMAND="RIG=\$PWD/.gpurig bash scripts/bench_e2e.sh $*" \
  python3 scripts/bench_e2e.py --pair "$PAIR" --out "$OUT/bench" --work /tmp/bench-e2e --deadline-s "$left" "$@"
rc=$?
tar czf "$OUT/bench-logs.tgz" -C /tmp bench-e2e 2>/dev/null
echo "[done] rc=$rc after $(( $(date +%s) - t0 ))s"
exit $rc
