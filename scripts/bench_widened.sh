#!/usr/bin/env bash
# Tokens/s at an 8B model's cost with a trained drafter's acceptance, in one device call: install the
# gpurig bundle and patch SGLang (gpu_setup.sh), train the pair (scripts/train/pair.py, capped so the call
# fits), widen it to Qwen3-8B's shape (scripts/train/widen.py: the same function; target 16 GB, drafter 1.9 GB
# on /tmp), then scripts/bench/e2e.py's pair phase on it. Results in $OUT/bench.tgz (report, results.json, plots,
# engine logs), so they come back from the device as one file.
# usage: RIG=$PWD/.gpurig bash scripts/bench_widened.sh [scripts/bench/e2e.py options]
#   defaults: --phases pair0 --budgets 16 32 --repeats 3 --pair-tokens 16384 (4 engines of ~18 GB each);
#   BUDGET_S: the whole call's seconds (default 580); TRAIN_CAPS: scripts/train/pair.py's caps (default "90 60", s);
#   TRAIN_ARGS: more scripts/train/pair.py options (e.g. "--preset strong"); REUSE=1: keep the pair and the widened
#   pair already in $PAIR / $WIDE (a warm machine's next call) instead of training and widening again;
#   BUDGET_GROUPS: the DDTREE budgets, in engine groups split by ';' (default "16 32": one group). Each group is
#   one scripts/bench/e2e.py run beside its own DFLASH, plain in the first group only, so a GPU that holds three
#   8B-shape engines benches any number of budgets; the call's time left is shared evenly. With several
#   groups, group i reports in bench/g<i>;
#   PAIR, WIDE, WORK: the folders (default /tmp/pair, /tmp/wide, /tmp/bench-e2e);
#   PAIR_SOURCE=calibrated: instead of training, build the calibrated off-chain pair (scripts/offchain/calibrated_pair.py:
#   a constructed drafter whose DFLASH accepts 7.79 tokens per round, CPU, ~30 s; its prompts.json holds ring prompts
#   on which its analytic acceptance holds, in its manifest) and widen that (TRAIN_CAPS / TRAIN_ARGS unused).
# Every option reaches every group's scripts/bench/e2e.py: e.g. budget auto (issue 48) beside the fixed budgets, with
# CUDA graphs (auto captures a verify graph per ladder width), in one group of five engines (an H200):
#   DDTREE_AUTO_MAX_BUDGET=32 RIG=$PWD/.gpurig BUDGET_GROUPS="16 32" TRAIN_CAPS="75 75" TRAIN_ARGS="--preset strong" \
#     bash scripts/bench_widened.sh --auto --batches 1 4 16 --repeats 5 --pair-tokens 12288
#   (with several groups each runs its own auto engine, and its goal lines weigh auto against that group's budgets).
set -uo pipefail
t0=$(date +%s)
BUDGET_S=${BUDGET_S:-580} PAIR=${PAIR:-/tmp/pair} WIDE=${WIDE:-/tmp/wide} WORK=${WORK:-/tmp/bench-e2e}
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/gpu_setup.sh" || exit 1
echo "[setup] $(( $(date +%s) - t0 ))s"
if [ "${REUSE:-0}" = 1 ] && [ -f "$PAIR/manifest.json" ] && [ -f "$WIDE/manifest.json" ]; then
  echo "[reuse] $PAIR and $WIDE"
elif [ "${PAIR_SOURCE:-train}" = calibrated ]; then
  # gpurig's configs and tokenizer are the templates (no weights needed); then the pair, checked by its own CPU forward
  { python3 "$RIG/scripts/make_models.py" /tmp/models && python3 -m scripts.offchain.calibrated_pair "$PAIR" \
      --template /tmp/models; } > "$OUT/train.log" 2>&1
  echo "[calibrated] rc=$? $(( $(date +%s) - t0 ))s"; tail -9 "$OUT/train.log"
else
  read -r target_cap draft_cap <<< "${TRAIN_CAPS:-90 60}"
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
  python3 -m scripts.train.pair "$PAIR" --set "target_cap_s=$target_cap" --set "draft_cap_s=$draft_cap" \
    ${TRAIN_ARGS:-} > "$OUT/train.log" 2>&1
  echo "[train] rc=$? $(( $(date +%s) - t0 ))s"; grep -E "estimate|held-out" "$OUT/train.log" | tail -2
fi
if [ "${REUSE:-0}" != 1 ] || [ ! -f "$PAIR/manifest.json" ] || [ ! -f "$WIDE/manifest.json" ]; then
  [ -f "$PAIR/manifest.json" ] || { tail -20 "$OUT/train.log"; exit 1; }
  cp "$PAIR/manifest.json" "$OUT/manifest.json"
  python3 -m scripts.train.widen "$PAIR" "$WIDE" --no-check > "$OUT/widen.log" 2>&1 || { tail -20 "$OUT/widen.log"; exit 1; }
  echo "[widen] $(( $(date +%s) - t0 ))s"
fi
IFS=';' read -r -a groups <<< "${BUDGET_GROUPS:-16 32}"
rc=0 i=0
for budgets in "${groups[@]}"; do
  i=$(( i + 1 ))
  out=$OUT/bench work=$WORK extra=()
  [ ${#groups[@]} -gt 1 ] && out=$OUT/bench/g$i work=$WORK/g$i
  [ $i -gt 1 ] && extra=(--no-plain)
  left=$(( (BUDGET_S - ($(date +%s) - t0) - 25) / (${#groups[@]} - i + 1) ))
  # shellcheck disable=SC2086  # budgets is a list of numbers
  BENCH_COMMAND="${PAIR_SOURCE:+PAIR_SOURCE=$PAIR_SOURCE }RIG=\$PWD/$(basename "${RIG:-.gpurig}") BUDGET_S=$BUDGET_S BUDGET_GROUPS='${BUDGET_GROUPS:-16 32}' bash scripts/bench_widened.sh $*" \
    python3 -m scripts.bench.e2e --pair "$WIDE" --out "$out" --work "$work" --deadline-s "$left" \
    --phases pair0 --budgets $budgets --repeats 3 --pair-tokens 16384 --startup-timeout-s 150 "${extra[@]}" "$@" || rc=1
  mkdir -p "$out" && cp "$work"/*.log "$out/" 2>/dev/null
  echo "[bench] group $i (budgets $budgets): $(( $(date +%s) - t0 ))s"
done
packed=(bench); for f in train.log widen.log; do [ -f "$OUT/$f" ] && packed+=("$f"); done
tar czf "$OUT/bench.tgz" -C "$OUT" "${packed[@]}" && rm -rf "$OUT/bench"
echo "[done] rc=$rc after $(( $(date +%s) - t0 ))s"
exit $rc
