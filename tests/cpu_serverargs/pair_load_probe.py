"""Load a trained pair into SGLang's own model classes on CPU and compare the drafter's function.

usage (repository root): SGLANG_USE_CPU_ENGINE=1 python -m tests.cpu_serverargs.pair_load_probe PAIR_DIR
(sglang on PYTHONPATH)
Prints JSON: SGLang's parsed draft config, the parameters that `load_weights` of its
`Qwen3ForCausalLM` (target) and `DFlashDraftModel` (drafter) left unset, and the
largest difference between our training module (scripts/train/dflash_draft.py) and the same draft
computed from SGLang's modules (its fused qkv / gate_up weights as loaded, its RMSNorm, its
rotary embedding) for one block [anchor, MASK...] over a context. The attention itself is plain
math on both sides (SGLang's runs in RadixAttention, which needs a KV pool): non-causal inside the
block, context strictly before the anchor, as SGLang's DFlash worker lays it out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.cpu_serverargs import torchvision_stand_in

torchvision_stand_in.install()
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig  # noqa: E402

from scripts.train import dflash_draft as dd  # noqa: E402

PAIR = Path(sys.argv[1])


def sglang_runtime() -> None:
    """The process-wide state SGLang's model constructors read: one rank, no dp attention."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method="tcp://127.0.0.1:29533",
                                    local_rank=0, backend="gloo")
    ps.initialize_model_parallel(1, 1)
    args = ServerArgs(model_path=str(PAIR / "target"), device="cpu")
    set_global_server_args_for_scheduler(args)
    initialize_dp_attention(args, ModelConfig(str(PAIR / "target")))


def not_loaded(model, path: Path, cast=None) -> list[str]:
    """Parameters (norm weights aside: they may stay 1) that load_weights did not change."""
    state = load_file(str(path))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.load_weights((n, cast(t) if cast else t) for n, t in state.items())
    return [n for n, p in model.named_parameters() if torch.equal(p, before[n]) and "norm" not in n]


def sglang_forward(m, embeds: torch.Tensor, feats: torch.Tensor, anchor: int) -> torch.Tensor:
    """One block at positions anchor.., context = feats[:anchor], through SGLang's modules."""
    block = embeds.shape[0]
    pos_b = torch.arange(anchor, anchor + block)
    pos_c = torch.arange(anchor)
    ctx = m.hidden_norm.forward_native(m.fc(feats[:anchor]))
    x = embeds
    for layer in m.layers:
        at = layer.self_attn
        hd, nh, nkv = at.head_dim, at.num_heads, at.num_kv_heads
        kc, vc = at.kv_proj_only(ctx)
        kc = at.k_norm.forward_native(kc.reshape(-1, hd)).view(anchor, nkv * hd)
        _, kc = at.rotary_emb.forward_native(pos_c, kc.new_empty(kc.shape), kc)
        h = layer.input_layernorm.forward_native(x)
        qkv, _ = at.qkv_proj(h)
        q, kb, vb = qkv.split([at.q_size, at.kv_size, at.kv_size], dim=-1)
        q = at.q_norm.forward_native(q.reshape(-1, hd)).view(block, nh * hd)
        kb = at.k_norm.forward_native(kb.reshape(-1, hd)).view(block, nkv * hd)
        q, kb = at.rotary_emb.forward_native(pos_b, q, kb)
        k = torch.cat([kc, kb]).view(-1, nkv, hd).repeat_interleave(nh // nkv, 1)
        v = torch.cat([vc, vb]).view(-1, nkv, hd).repeat_interleave(nh // nkv, 1)
        w = torch.softmax(torch.einsum("qhd,khd->hqk", q.view(block, nh, hd), k) * at.scaling, -1)
        attn, _ = at.o_proj(torch.einsum("hqk,khd->qhd", w, v).reshape(block, nh * hd))
        x = x + attn
        up, _ = layer.mlp.gate_up_proj(layer.post_attention_layernorm.forward_native(x))
        down, _ = layer.mlp.down_proj(layer.mlp.act_fn.forward_native(up))
        x = x + down
    return m.norm.forward_native(x)


def main() -> None:
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    torch.manual_seed(0)
    from sglang.srt.models.dflash import DFlashDraftModel
    from sglang.srt.models.qwen3 import Qwen3ForCausalLM

    sglang_runtime()
    target = Qwen3ForCausalLM(AutoConfig.from_pretrained(PAIR / "target"))
    target_missing = not_loaded(target, PAIR / "target" / "model.safetensors")
    cfg = AutoConfig.from_pretrained(PAIR / "draft")
    parsed = parse_dflash_draft_config(draft_hf_config=cfg)
    m = DFlashDraftModel(cfg).float()
    untouched = not_loaded(m, PAIR / "draft" / "model.safetensors", cast=lambda t: t.float())
    state = load_file(str(PAIR / "draft" / "model.safetensors"))

    layer_ids = parsed.resolve_target_layer_ids(target_num_layers=int(parsed.num_target_layers),
                                                draft_num_layers=int(cfg.num_hidden_layers))
    ours = dd.DFlashDraft(hidden=cfg.hidden_size, inter=cfg.intermediate_size, layers=cfg.num_hidden_layers,
                          heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                          num_features=len(layer_ids), eps=cfg.rms_norm_eps,
                          theta=cfg.rope_parameters["rope_theta"])
    ours.load_state_dict({k: v.float() for k, v in state.items()})
    block, seq = int(parsed.block_size), 24
    anchor = 11
    feats = torch.randn(seq, len(layer_ids) * cfg.hidden_size)
    embeds = torch.randn(block, cfg.hidden_size)
    with torch.no_grad():
        theirs = sglang_forward(m, embeds, feats, anchor)
        anchors = torch.tensor([[anchor]])
        mask = dd.block_mask(anchors, seq, block)
        pos = (anchor + torch.arange(block))[None]
        mine = ours(embeds[None], feats[None], pos, mask)[0]
    print(json.dumps({
        "block_size": parsed.block_size, "mask_token_id": parsed.mask_token_id, "target_layer_ids": layer_ids,
        "num_context_features": m.num_context_features, "not_loaded": untouched,
        "target_not_loaded": target_missing, "target_params": len(list(target.parameters())),
        "max_abs_diff": (mine - theirs).abs().max().item(), "max_abs": theirs.abs().max().item(),
    }))


if __name__ == "__main__":
    main()
