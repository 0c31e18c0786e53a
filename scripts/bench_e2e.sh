#!/usr/bin/env bash
# The end-to-end benchmark in one device call: install the gpurig bundle, patch SGLang for DDTREE,
# train the pair first if a pair phase runs and $PAIR has none (a cold machine: ~4.5 min of the call), then
# scripts/bench/e2e.py with a deadline that leaves time to write the report. Results in $OUT/bench
# (benchmarks.md, PNGs, results.json), engine logs in $OUT/bench-logs.tgz.
# usage: RIG=/path/to/.gpurig bash scripts/bench_e2e.sh [scripts/bench/e2e.py options]
#   BUDGET_S: the whole call's seconds (default 360, or 540 when the pair must be trained first);
#   the benchmark's --deadline-s is what is left of it after setup, less 25 s for the report.
set -uo pipefail
export PAIR=${PAIR:-/tmp/trained-pair}
phases=pair0,pair1,big  # scripts/bench/e2e.py's default
for ((i = 1; i <= $#; i++)); do
  case "${!i}" in --phases) j=$((i + 1)); phases=${!j} ;; --phases=*) phases=${!i#--phases=} ;; esac
done
needs_pair=0; [[ ",$phases," == *,pair* ]] && [ ! -f "$PAIR/manifest.json" ] && needs_pair=1
if [ "$needs_pair" = 0 ]; then BUDGET_S=${BUDGET_S:-360}; else BUDGET_S=${BUDGET_S:-540}; fi
t0=$(date +%s)
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/gpu_setup.sh" || exit 1
if [ "$needs_pair" = 1 ]; then
  echo "[train] no pair at $PAIR: training it first"
  python3 -m scripts.train.pair "$PAIR"
  [ -f "$PAIR/manifest.json" ] || { echo "[train] FAILED, no pair written"; exit 1; }
  cp -r "$PAIR" "$OUT/trained-pair"
fi
left=$(( BUDGET_S - ($(date +%s) - t0) - 25 ))
echo "[setup] $(( $(date +%s) - t0 ))s; benchmark deadline ${left}s"
BENCH_COMMAND="RIG=\$PWD/$(basename "${RIG:-.gpurig}") BUDGET_S=$BUDGET_S bash scripts/bench_e2e.sh $*" \
  python3 -m scripts.bench.e2e --pair "$PAIR" --out "$OUT/bench" --work /tmp/bench-e2e --deadline-s "$left" "$@"
rc=$?
tar czf "$OUT/bench-logs.tgz" -C /tmp bench-e2e 2>/dev/null
echo "[done] rc=$rc after $(( $(date +%s) - t0 ))s"
exit $rc
