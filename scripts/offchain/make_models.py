"""Write the off-chain oracle pair (see scripts/offchain/oracle.py) as model folders SGLang loads.

usage: python -m scripts.offchain.make_models OUT_DIR [--template DIR] [--skip-check]
  DIR (default OUT_DIR): the gpurig model folders DIR/target and DIR/draft (make_models.py), whose
  config.json files are the templates and whose tokenizer files are copied.
  OUT_DIR/target_offchain: Qwen3ForCausalLM, bf16 safetensors (~14 MB)
  OUT_DIR/draft_offchain:  DFlashDraftModel, bf16 safetensors (~10 MB)
Before writing, the weights are run through the plain-torch forward (scripts/offchain/reference.py): the
target must follow its rule and the draft must give exactly the planned logits; otherwise exit 1.
Deterministic: the same files on every machine (seeded plan, no random weights).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from scripts.offchain import oracle
from scripts.offchain import reference as ref

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CHECK_PROMPTS = ([5, 17, 70, 71], [300, 301], [127, 64])


def check(target_sd: dict, draft_sd: dict, mask_id: int, plan: oracle.Plan = oracle.DEFAULT,
          prompts: tuple[list[int], ...] = CHECK_PROMPTS) -> list[str]:
    """Problems of the construction under the plain-torch forward (empty when it is as planned)."""
    t, d = ref.bf16_state(target_sd), ref.bf16_state(draft_sd)
    problems = []
    for prompt in prompts:
        seq = prompt + oracle.continuation(prompt, 10)
        logits = ref.target_logits(t, seq, list(range(len(seq))), ref.causal(len(seq)), oracle.TARGET_THETA,
                                   oracle.TARGET_LAYERS)
        top = logits.topk(2, dim=-1)
        got = top.indices[len(prompt) - 1:-1, 0].tolist()
        if got != seq[len(prompt):]:
            problems.append(f"target on {prompt}: greedy {got}, rule says {seq[len(prompt):]}")
        margin = float((top.values[1:, 0] - top.values[1:, 1]).min())
        if margin < 10:
            problems.append(f"target on {prompt}: top-2 logit margin {margin:.2f} < 10")
        feats = ref.context_features(t, seq[:-1], oracle.TARGET_THETA, oracle.CAPTURE_LAYERS)
        drafted = ref.draft_logits(d, t, seq[-1], mask_id, len(seq) - 1, feats, oracle.DRAFT_THETA,
                                   oracle.DRAFT_LAYERS, plan.block)
        err = float((drafted - oracle.draft_logits(seq[-1], plan)).abs().max())
        if err > 1e-3:
            problems.append(f"draft after {seq[-2:]}: logits differ from the plan by {err:.4f}")
    return problems


def write(folder: Path, config: dict, state: dict, tokenizer_from: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--template", type=Path, help="folder with the gpurig target/ and draft/ (default OUT_DIR)")
    ap.add_argument("--skip-check", action="store_true", help="skip the plain-torch check of the weights")
    a = ap.parse_args()
    template = a.template or a.out_dir
    try:
        target_cfg = json.loads((template / "target" / "config.json").read_text())
        draft_cfg = json.loads((template / "draft" / "config.json").read_text())
    except OSError as e:
        print(f"make_oracle_models: no template config ({e}); run gpurig's make_models.py first", file=sys.stderr)
        return 1
    if int(target_cfg.get("vocab_size", -1)) != oracle.VOCAB:
        print(f"make_oracle_models: template vocab {target_cfg.get('vocab_size')} != {oracle.VOCAB}", file=sys.stderr)
        return 1
    dcfg = oracle.draft_config(draft_cfg)
    mask_id = int(dcfg["dflash_config"]["mask_token_id"])
    target_sd, draft_sd = oracle.target_state_dict(), oracle.draft_state_dict(mask_id)
    problems = [] if a.skip_check else check(target_sd, draft_sd, mask_id)
    if problems:
        print("make_oracle_models: the construction is wrong:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    write(a.out_dir / "target_offchain", oracle.target_config(target_cfg), target_sd, template / "target")
    write(a.out_dir / "draft_offchain", dcfg, draft_sd, template / "target")
    print(json.dumps({"out": str(a.out_dir), "models": ["target_offchain", "draft_offchain"], "mask_token_id": mask_id,
                      "checked": not a.skip_check}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
