#!/usr/bin/env bash
# The DDTree GPU check in one device call (the SGLang release the gpurig bundle was built with,
# RELEASE=0.5.11-0.5.17; the DDTree worker is DDTreeWorkerV1 on 0.5.11-0.5.13, V2 after):
#   install the bundle into /tmp/site, patch SGLang for DDTREE (`python -m ddtree_patch apply`),
#   check the start-up gates on real ServerArgs, build the tiny models and the off-chain oracle
#   (scripts/offchain/make_models.py), run the engine matrix (suite base: plain / DFLASH / DDTREE budgets
#   1, 8, 32 x target_struct, target_rand x CUDA graphs off/on, a sampled run, round timing; suite
#   offchain: plain / DFLASH / DDTREE budgets 4..64 x CUDA graphs off/on on the off-chain oracle,
#   judged against its analytic acceptance; with --auto-budget also --speculative-ddtree-budget auto
#   rows) and print the summary tables. Logs and results in $OUT.
# usage: RIG=/path/to/.gpurig bash scripts/gpu_check.sh [scripts/gpu/matrix.py options, e.g. --suite offchain]
set -uo pipefail
t0=$(date +%s)
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/gpu_setup.sh" || exit 1
python3 -m ddtree_patch audit --target "$SITE" > "$OUT/audit.log" 2>&1; echo "[audit] exit $? (0 = every DFLASH site decided)"
python3 "$RIG/scripts/make_models.py" /tmp/models --weights > "$OUT/models.log" 2>&1 || { tail "$OUT/models.log"; exit 1; }
# suite arch only: a failure here leaves the other suites' rows to run
python3 -m scripts.gpu.make_arch_models /tmp/models > "$OUT/arch_models.log" 2>&1 || { echo "[models] scripts/gpu/make_arch_models.py FAILED (the arch rows cannot run):"; tail "$OUT/arch_models.log"; }
python3 -m scripts.offchain.make_models /tmp/models > "$OUT/oracle_models.log" 2>&1 &  # CPU, beside the gates
oracle_pid=$!
python3 -m scripts.gpu.gate_check 2>&1 | tee "$OUT/gates.log" | grep -E "^(GATE|IMPORT)"
if wait $oracle_pid; then
  echo "[models] off-chain oracle built and checked: $(tail -1 "$OUT/oracle_models.log")"
else
  echo "[models] scripts/offchain/make_models.py FAILED (the off-chain rows cannot run):"; tail -20 "$OUT/oracle_models.log"; exit 1
fi
echo "[setup] $(( $(date +%s) - t0 ))s"
python3 -m scripts.gpu.matrix "$OUT/matrix" "$@"
rc=$?
tar czf "$OUT/matrix.tgz" -C "$OUT" matrix && rm -rf "$OUT/matrix/configs" "$OUT/matrix/results" "$OUT/matrix/logs"
tar czf "$OUT/jitcache.tgz" -C /tmp/tvm-ffi-cache . 2>/dev/null
tar czf "$OUT/tritoncache.tgz" -C ~/.triton/cache . 2>/dev/null
echo "[done] rc=$rc after $(( $(date +%s) - t0 ))s"
exit $rc
