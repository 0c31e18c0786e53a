#!/usr/bin/env bash
# Tokens/s at an 8B model's cost with a trained drafter's acceptance, in one device call: install the
# gpurig bundle and patch SGLang (gpu_setup.sh), train the pair (train_pair.py, capped so the call
# fits), widen it to Qwen3-8B's shape (widen_pair.py: the same function; target 16 GB, drafter 1.9 GB
# on /tmp), then bench_e2e.py's pair phase on it. Results in $OUT/bench.tgz (report, results.json, plots,
# engine logs), so they come back from the device as one file.
# usage: RIG=$PWD/.gpurig bash scripts/bench_widened.sh [bench_e2e.py options]
#   defaults: --phases pair0 --budgets 16 32 --repeats 3 --pair-tokens 16384 (4 engines of ~18 GB each);
#   BUDGET_S: the whole call's seconds (default 580); TRAIN_CAPS: train_pair.py's caps (default "90 60", s);
#   PAIR, WIDE, WORK: the folders (default /tmp/pair, /tmp/wide, /tmp/bench-e2e).
set -uo pipefail
t0=$(date +%s)
BUDGET_S=${BUDGET_S:-580} PAIR=${PAIR:-/tmp/pair} WIDE=${WIDE:-/tmp/wide} WORK=${WORK:-/tmp/bench-e2e}
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/gpu_setup.sh" || exit 1
read -r target_cap draft_cap <<< "${TRAIN_CAPS:-90 60}"
python3 scripts/train_pair.py "$PAIR" --set "target_cap_s=$target_cap" --set "draft_cap_s=$draft_cap" > "$OUT/train.log" 2>&1
echo "[train] rc=$? $(( $(date +%s) - t0 ))s"; grep -E "estimate|held-out" "$OUT/train.log" | tail -2
[ -f "$PAIR/manifest.json" ] || { tail -20 "$OUT/train.log"; exit 1; }
python3 scripts/widen_pair.py "$PAIR" "$WIDE" --no-check > "$OUT/widen.log" 2>&1 || { tail -20 "$OUT/widen.log"; exit 1; }
echo "[widen] $(( $(date +%s) - t0 ))s"
left=$(( BUDGET_S - ($(date +%s) - t0) - 25 ))
BENCH_COMMAND="RIG=\$PWD/$(basename "${RIG:-.gpurig}") BUDGET_S=$BUDGET_S bash scripts/bench_widened.sh $*" \
  python3 scripts/bench_e2e.py --pair "$WIDE" --out "$OUT/bench" --work "$WORK" --deadline-s "$left" \
  --phases pair0 --budgets 16 32 --repeats 3 --pair-tokens 16384 --startup-timeout-s 150 "$@"
rc=$?
mkdir -p "$OUT/bench" && cp "$WORK"/*.log "$OUT/bench/" 2>/dev/null
tar czf "$OUT/bench.tgz" -C "$OUT" bench train.log widen.log && rm -rf "$OUT/bench"
echo "[done] rc=$rc after $(( $(date +%s) - t0 ))s"
exit $rc
