"""Load the off-chain oracle's files with real libraries (inside a release's CPU venv): the target with
transformers' own Qwen3ForCausalLM, the draft config with SGLang's own DFlash config parser.

usage: python oracle_probe.py MODELS_DIR CASE_JSON   (sglang on PYTHONPATH)
CASE_JSON: {"prompts": [[ids]], "max_new": n, "tree": {"context": [ids], "tokens": [ids], "parent": [..],
            "depth": [..]}}  (tree node 0 = the root, i.e. the bonus token after the context)
Prints JSON: greedy outputs, the argmax at every tree node under the ancestor mask and under a
causal mask in node order, and the parsed DFlash draft config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torchvision_stand_in  # beside this file

torchvision_stand_in.install()  # before transformers and SGLang look for torchvision; the venv has none

from transformers import AutoConfig, Qwen3ForCausalLM  # noqa: E402


def tree_argmax(model, context: list[int], tree: dict, ancestor: bool) -> list[int]:
    n, prefix = len(tree["tokens"]), len(context)
    visible = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        if ancestor:
            j = i
            while j >= 0:
                visible[i, j] = True
                j = tree["parent"][j]
        else:
            visible[i, : i + 1] = True
    full = torch.zeros(prefix + n, prefix + n, dtype=torch.bool)
    full[:prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool).tril()
    full[prefix:, :prefix] = True
    full[prefix:, prefix:] = visible
    mask = torch.where(full, 0.0, float("-inf")).to(torch.bfloat16)[None, None]
    ids = torch.tensor([context + tree["tokens"]])
    positions = torch.tensor([list(range(prefix)) + [prefix + d for d in tree["depth"]]])
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, position_ids=positions).logits[0, prefix:]
    return logits.argmax(-1).tolist()


def key_mismatch(models: Path, target: Qwen3ForCausalLM) -> dict[str, list[str]]:
    """Checkpoint names nobody would load, or parameters nobody would set: the target against
    transformers' Qwen3, the draft against its Qwen3 layers (DFlash's `layers.*` + `norm`) plus
    DFlash's own `fc` and `hidden_norm`, as SGLang's DFlashDraftModel names them."""
    from safetensors import safe_open

    def names(folder: str) -> set[str]:
        with safe_open(str(models / folder / "model.safetensors"), "pt") as f:
            return set(f.keys())

    draft_like = Qwen3ForCausalLM(AutoConfig.from_pretrained(models / "draft_offchain"))
    draft_want = {k[len("model."):] for k in draft_like.state_dict() if k.startswith("model.layers.")}
    draft_want |= {"norm.weight", "fc.weight", "hidden_norm.weight"}
    target_want, target_got, draft_got = set(target.state_dict()), names("target_offchain"), names("draft_offchain")
    return {"target_missing": sorted(target_want - target_got), "target_unused": sorted(target_got - target_want),
            "draft_missing": sorted(draft_want - draft_got), "draft_unused": sorted(draft_got - draft_want)}


def main() -> None:
    models, case = Path(sys.argv[1]), json.loads(sys.argv[2])
    model = Qwen3ForCausalLM.from_pretrained(models / "target_offchain", dtype=torch.bfloat16,
                                             attn_implementation="eager").eval()
    outputs = []
    for prompt in case["prompts"]:
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=case["max_new"],
                             do_sample=False, pad_token_id=0)
        outputs.append(out[0, len(prompt):].tolist())
    tree = case["tree"]
    import sglang.srt.server_args  # noqa: F401 - first, as SGLang itself imports it (avoids an import cycle)
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    from sglang.srt.configs.model_config import ModelConfig

    parsed = parse_dflash_draft_config(draft_hf_config=AutoConfig.from_pretrained(models / "draft_offchain"))
    target_cfg = ModelConfig(str(models / "target_offchain"))
    draft_cfg = ModelConfig(str(models / "draft_offchain"), is_draft_model=True)
    print(json.dumps({
        "key_mismatch": key_mismatch(models, model),
        "sglang_model_config": {
            "target": [target_cfg.hf_config.architectures[0], target_cfg.hidden_size, target_cfg.num_attention_heads,
                       target_cfg.get_total_num_kv_heads(), target_cfg.head_dim, target_cfg.vocab_size],
            "draft": [draft_cfg.hf_config.architectures[0], draft_cfg.hidden_size, draft_cfg.num_attention_heads,
                      draft_cfg.get_total_num_kv_heads(), draft_cfg.head_dim, draft_cfg.num_hidden_layers]},
        "outputs": outputs,
        "tree_ancestor": tree_argmax(model, tree["context"], tree, ancestor=True),
        "tree_causal": tree_argmax(model, tree["context"], tree, ancestor=False),
        "draft": {"block_size": parsed.resolve_block_size(default=None), "mask_token_id": parsed.mask_token_id,
                  "target_layer_ids": parsed.resolve_target_layer_ids(target_num_layers=4, draft_num_layers=2)},
    }))


if __name__ == "__main__":
    main()
