#!/usr/bin/env bash
# Train the benchmark's model pair on the GPU machine (one device call, ~4 min):
#   install the gpurig bundle (SGLang's transformers/tokenizers, so SGLang reads the saved tokenizer),
#   run scripts/train/pair.py into $PAIR (default /tmp/trained-pair, kept on a warm machine for
#   scripts/bench_e2e.sh) and copy it to $OUT/trained-pair.
# usage: RIG=/path/to/.gpurig bash scripts/train_pair.sh [scripts/train/pair.py options]
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RIG=${RIG:-$REPO/.gpurig} OUT=${OUT:-/tmp/out} PAIR=${PAIR:-/tmp/trained-pair}
mkdir -p "$OUT"
# shellcheck source=/dev/null
source "$RIG/scripts/env.sh" || { echo "bundle install failed"; exit 1; }
cd "$REPO" || exit 1
rm -rf "$PAIR"
python3 -m scripts.train.pair "$PAIR" "$@"
rc=$?
[ -f "$PAIR/manifest.json" ] || { echo "[train] FAILED (rc=$rc), no pair written"; exit 1; }
cp -r "$PAIR" "$OUT/trained-pair"
[ $rc -eq 0 ] || echo "[train] rc=$rc: the pair is saved, see the manifest's held_out_estimate error"
echo "[train] $(python3 -c "import json;m=json.load(open('$PAIR/manifest.json'));print(m['seconds'],'s;',m['weight_bytes'],'bytes; offline tokens/round:',m['held_out_estimate'])")"
exit $rc
