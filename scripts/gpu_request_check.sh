#!/usr/bin/env bash
# Per-request refusals on a real DDTREE engine, in one device call (the gpurig bundle's SGLang):
#   install the bundle into /tmp/site, `ddtree-patch apply` it, build the tiny models, then
#   scripts/gpu/request_check.py: a json_schema request and a return_logprob request must be
#   refused with DDTree's messages, a plain one served. Exit 0 only then.
# usage: RIG=/path/to/.gpurig bash scripts/gpu_request_check.sh [--budget N]
set -uo pipefail
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/gpu_setup.sh" || exit 1
[ -d /tmp/models/target_struct ] || python3 "$RIG/scripts/make_models.py" /tmp/models --weights > "$OUT/models.log" 2>&1 \
  || { tail "$OUT/models.log"; exit 1; }
python3 -m scripts.gpu.request_check --target /tmp/models/target_struct --draft /tmp/models/draft_rand "$@" 2>"$OUT/requests.err" \
  | tee "$OUT/requests.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || tail -40 "$OUT/requests.err"
echo "[done] rc=$rc"
exit "$rc"
