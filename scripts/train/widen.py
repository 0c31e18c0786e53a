"""Widen a trained pair (scripts/train/pair.py) to a large model's shape without changing what it computes.

usage: python -m scripts.train.widen PAIR OUT [--shape qwen3-8b|small] [--device cuda|cpu] [--no-check]
  PAIR: scripts/train/pair.py's folder (target/, draft/, manifest.json); OUT gets the same layout.

Why: the trained pair's target is too small for any speculation to pay (its forward costs less
than a draft pass), so its tokens/s say nothing about a real target. Widened, the same pair
accepts the same tokens while every forward costs what Qwen3-8B's does (hidden 4096, MLP 12288,
36 layers, vocab 151936; a 5-layer drafter, z-lab's Qwen3-8B-DFlash-b16 shape), so the
end-to-end benchmark (scripts/bench/e2e.py --pair OUT) times plain / DFLASH / DDTREE at that cost with a
trained drafter's acceptance.

How the function is kept (every new weight is zero unless said):
- hidden: the trained dims come first; RMSNorm weights over the hidden are scaled by
  sqrt(H / H') (the mean square now runs over H' dims; H' / H a power of 4, so bf16 keeps the
  weights exact) and rms_norm_eps by H / H';
- heads: head_dim is kept (RoPE's frequencies depend on it), so Qwen3-8B's 32 x 128 query dims
  become 64 x 64 (the same projection sizes and KV bytes per token); each trained query head
  goes where the new grouping maps it onto its own KV head;
- layers: new layers follow the trained ones and write nothing into the residual (their o_proj
  and down_proj are zero), so DFlash's captured layers (target_layer_ids) are unchanged;
- vocab: new tokens must never win, but an lm_head has no bias. One new hidden dim C carries a
  constant K in every embedding row (nothing writes to C, so the residual keeps it; K is 1e-3 of
  the smallest non-zero embedding row's norm, so every RMS moves by < 1e-6); the final norms weigh C by
  FINAL_C and new tokens' lm_head rows read -NEW_TOKEN_WEIGHT there: their logits sit far below
  the trained ones. `check` measures that margin on held-out text.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Shape:
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    draft_layers: int


SHAPES = {
    # Qwen3-8B at head_dim 64 (its own is 128): 64 x 64 query dims, 16 x 64 KV dims, as 32 x 128 / 8 x 128
    "qwen3-8b": Shape(hidden=4096, inter=12288, layers=36, heads=64, kv_heads=16, vocab=151936, draft_layers=5),
    # for tests: a few times the tiny preset
    "small": Shape(hidden=256, inter=320, layers=5, heads=8, kv_heads=2, vocab=700, draft_layers=3),
    # for CPU checks of the 1024-wide off-chain pairs (scripts/offchain/calibrated_pair.py), which `small`
    # cannot hold: 4 x their hidden, their 16 heads, a few layers
    "small-wide": Shape(hidden=4096, inter=320, layers=5, heads=16, kv_heads=16, vocab=700, draft_layers=3),
}
FINAL_C = 1024.0  # final norms' weight on the constant dim (bf16-exact)
NEW_TOKEN_WEIGHT = 1024.0  # new tokens' lm_head entry on it (negated)
TOP = 64  # `check`: new tokens must stay below the TOP-th trained logit (DDTree's largest top-K)
MARGIN = f"new_token_margin_vs_top{TOP}"


def _placed(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """A float32 zero tensor of `shape` with `t` in its leading corner (every widened weight's form)."""
    out = torch.zeros(shape)
    out[tuple(slice(0, n) for n in t.shape)] = t.float()
    return out


class Widener:
    """Maps one trained pair's tensors into `shape` (module docstring)."""

    def __init__(self, cfg: dict, shape: Shape, embed: torch.Tensor) -> None:
        self.h, self.inter, self.heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
        self.kv_heads, self.head_dim, self.vocab = cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"]
        self.s = shape
        if shape.hidden <= self.h or shape.inter < self.inter or shape.vocab < self.vocab:
            raise ValueError(f"{shape} is not wider than the pair (hidden {self.h}, mlp {self.inter}, vocab {self.vocab})")
        if shape.heads % shape.kv_heads:
            raise ValueError(f"{shape}: {shape.heads} query heads do not group over {shape.kv_heads} KV heads")
        if math.log(shape.hidden / self.h, 4) % 1:
            raise ValueError(f"{shape}: hidden {shape.hidden} / {self.h} is not a power of 4, so the norm weights' "
                             "scale sqrt(H / H') would round in bf16")
        self.group, self.new_group = self.heads // self.kv_heads, shape.heads // shape.kv_heads
        if self.kv_heads > shape.kv_heads or self.group > self.new_group:
            raise ValueError(f"{shape}: {self.heads} / {self.kv_heads} heads do not map onto "
                             f"{shape.heads} / {shape.kv_heads}")
        self.c = self.h  # the constant dim: the first new one
        self.scale = math.sqrt(self.h / shape.hidden)
        norms = embed.float().norm(dim=1)
        self.k = 1e-3 * float(norms[norms > 0].min())  # a row of zeros stays zero but for K: harmless

    def q_index(self, i: int) -> int:
        """Where trained query head i goes: the new group of its own KV head."""
        return (i // self.group) * self.new_group + i % self.group

    def norm(self, w: torch.Tensor, final: bool = False) -> torch.Tensor:
        out = _placed(w.float() * self.scale, self.s.hidden)
        if final:
            out[self.c] = FINAL_C
        return out

    def embedding(self, e: torch.Tensor) -> torch.Tensor:
        out = _placed(e, self.s.vocab, self.s.hidden)
        out[:, self.c] = self.k
        return out

    def lm_head(self, w: torch.Tensor) -> torch.Tensor:
        out = _placed(w, self.s.vocab, self.s.hidden)
        out[self.vocab:, self.c] = -NEW_TOKEN_WEIGHT
        return out

    def _heads_out(self, w: torch.Tensor, heads: int, new_heads: int, index) -> torch.Tensor:
        """q/k/v_proj [heads * hd, H] -> [new_heads * hd, H']."""
        hd = self.head_dim
        out = torch.zeros(new_heads, hd, self.s.hidden)
        old = w.float().view(heads, hd, self.h)
        for i in range(heads):
            out[index(i), :, :self.h] = old[i]
        return out.view(new_heads * hd, self.s.hidden)

    def layer(self, sd: dict[str, torch.Tensor], p: str) -> dict[str, torch.Tensor]:
        """One trained decoder layer's tensors (prefix `p`) in the new shape."""
        hd = self.head_dim
        o = torch.zeros(self.s.hidden, self.s.heads, hd)
        old_o = sd[p + "self_attn.o_proj.weight"].float().view(self.h, self.heads, hd)
        for i in range(self.heads):
            o[:self.h, self.q_index(i)] = old_o[:, i]
        out = {p + "self_attn.q_proj.weight": self._heads_out(sd[p + "self_attn.q_proj.weight"], self.heads,
                                                              self.s.heads, self.q_index),
               p + "self_attn.o_proj.weight": o.view(self.s.hidden, self.s.heads * hd)}
        for name in ("k_proj", "v_proj"):
            out[p + f"self_attn.{name}.weight"] = self._heads_out(sd[p + f"self_attn.{name}.weight"], self.kv_heads,
                                                                  self.s.kv_heads, lambda j: j)
        for name in ("q_norm", "k_norm"):
            out[p + f"self_attn.{name}.weight"] = sd[p + f"self_attn.{name}.weight"].float()
        for name in ("input_layernorm", "post_attention_layernorm"):
            out[p + f"{name}.weight"] = self.norm(sd[p + f"{name}.weight"])
        for name in ("gate_proj", "up_proj"):
            out[p + f"mlp.{name}.weight"] = _placed(sd[p + f"mlp.{name}.weight"], self.s.inter, self.s.hidden)
        out[p + "mlp.down_proj.weight"] = _placed(sd[p + "mlp.down_proj.weight"], self.s.hidden, self.s.inter)
        return out

    def silent_layer(self, p: str) -> dict[str, torch.Tensor]:
        """A new layer: it reads, writes nothing (zero o_proj / down_proj)."""
        hd, s = self.head_dim, self.s
        z = torch.zeros
        return {p + "self_attn.q_proj.weight": z(s.heads * hd, s.hidden),
                p + "self_attn.k_proj.weight": z(s.kv_heads * hd, s.hidden),
                p + "self_attn.v_proj.weight": z(s.kv_heads * hd, s.hidden),
                p + "self_attn.o_proj.weight": z(s.hidden, s.heads * hd),
                p + "self_attn.q_norm.weight": torch.ones(hd), p + "self_attn.k_norm.weight": torch.ones(hd),
                p + "input_layernorm.weight": torch.ones(s.hidden), p + "post_attention_layernorm.weight": torch.ones(s.hidden),
                p + "mlp.gate_proj.weight": z(s.inter, s.hidden), p + "mlp.up_proj.weight": z(s.inter, s.hidden),
                p + "mlp.down_proj.weight": z(s.hidden, s.inter)}

    def fc(self, w: torch.Tensor) -> torch.Tensor:
        """DFlash's fc [H, F * H] over F captured layers -> [H', F * H']."""
        f = w.shape[1] // self.h
        return _placed(w.view(self.h, f, self.h), self.s.hidden, f, self.s.hidden).view(self.s.hidden, f * self.s.hidden)

    def config(self, cfg: dict, layers: int) -> dict:
        out = dict(cfg, hidden_size=self.s.hidden, intermediate_size=self.s.inter, num_hidden_layers=layers,
                   num_attention_heads=self.s.heads, num_key_value_heads=self.s.kv_heads, vocab_size=self.s.vocab,
                   rms_norm_eps=cfg["rms_norm_eps"] * self.h / self.s.hidden)
        if cfg.get("layer_types"):  # one per layer (transformers validates the count)
            out["layer_types"] = [cfg["layer_types"][0]] * layers
        return out


def _bf16(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(torch.bfloat16).contiguous() for k, v in d.items()}


def widen_target(sd: dict[str, torch.Tensor], w: Widener) -> dict[str, torch.Tensor]:
    """Qwen3ForCausalLM's tensors, bf16 (converted a layer at a time: an 8B shape in float32 is 32 GB)."""
    n = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("model.layers."))
    out = _bf16({"model.embed_tokens.weight": w.embedding(sd["model.embed_tokens.weight"]),
                 "lm_head.weight": w.lm_head(sd["lm_head.weight"]),
                 "model.norm.weight": w.norm(sd["model.norm.weight"], final=True)})
    for i in range(w.s.layers):
        p = f"model.layers.{i}."
        out.update(_bf16(w.layer(sd, p) if i < n else w.silent_layer(p)))
    return out


def widen_draft(sd: dict[str, torch.Tensor], w: Widener) -> dict[str, torch.Tensor]:
    """DFlashDraftModel's tensors, bf16; new layers after the trained ones up to `draft_layers`."""
    n = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("layers."))
    out = _bf16({"fc.weight": w.fc(sd["fc.weight"]), "hidden_norm.weight": w.norm(sd["hidden_norm.weight"]),
                 "norm.weight": w.norm(sd["norm.weight"], final=True)})
    for i in range(max(n, w.s.draft_layers)):
        p = f"layers.{i}."
        out.update(_bf16(w.layer(sd, p) if i < n else w.silent_layer(p)))
    return out


def widen(pair: Path, out: Path, shape: Shape) -> Widener:
    """Write the widened pair into `out` (target/, draft/, tokenizer files, manifest.json, prompts.json)."""
    from safetensors.torch import load_file, save_file

    tcfg = json.loads((pair / "target" / "config.json").read_text())
    dcfg = json.loads((pair / "draft" / "config.json").read_text())
    tsd = load_file(str(pair / "target" / "model.safetensors"))
    dsd = load_file(str(pair / "draft" / "model.safetensors"))
    w = Widener(tcfg, shape, tsd["model.embed_tokens.weight"])
    for name, cfg, sd, fn, layers in (("target", tcfg, tsd, widen_target, shape.layers),
                                      ("draft", dcfg, dsd, widen_draft, shape.draft_layers)):
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        new_cfg = w.config(cfg, layers)
        if name == "draft":
            new_cfg["num_target_layers"] = shape.layers
        (d / "config.json").write_text(json.dumps(new_cfg, indent=2) + "\n")
        save_file(fn(sd, w), str(d / "model.safetensors"))
        for f in (pair / name).iterdir():
            if f.name not in ("config.json", "model.safetensors") and f.is_file():
                shutil.copy(f, d / f.name)
    if (pair / "prompts.json").is_file():  # the pair's held-out prompts (scripts/train/pair.py), what the bench serves
        shutil.copy(pair / "prompts.json", out / "prompts.json")
    manifest = json.loads((pair / "manifest.json").read_text())
    manifest["widened"] = {"from": str(pair), "shape": vars(shape), "head_dim": w.head_dim, "constant_dim": w.c,
                           "constant": w.k,
                           "final_c": FINAL_C, "new_token_weight": NEW_TOKEN_WEIGHT}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return w


@torch.no_grad()
def check(pair: Path, out: Path, device: str, rows: int = 4, seq: int = 96) -> dict:
    """The widened pair against the trained one, in float32 on `device`, on held-out-like windows of
    the pair's own greedy text: the target's logits over the trained vocab and the drafter's block
    logits (its features from each target's own captured layers), their largest differences and
    argmax agreement; and the margin of new tokens (`MARGIN`): the highest new-token logit minus the
    TOP-th highest trained one, over every position (negative = never in a top-TOP)."""
    from safetensors.torch import load_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from scripts.train import dflash_draft as dd
    from scripts.train.pair import FeatureTap

    def load(folder: Path):
        dcfg = json.loads((folder / "draft" / "config.json").read_text())
        with torch.device(device):  # an 8B-shape model initialised on the CPU would take minutes
            model = Qwen3ForCausalLM(Qwen3Config.from_pretrained(str(folder / "target")))
        model.load_state_dict({k: v.float() for k, v in load_file(str(folder / "target" / "model.safetensors")).items()})
        draft = dd.DFlashDraft(hidden=dcfg["hidden_size"], inter=dcfg["intermediate_size"],
                               layers=dcfg["num_hidden_layers"], heads=dcfg["num_attention_heads"],
                               kv_heads=dcfg["num_key_value_heads"], head_dim=dcfg["head_dim"],
                               num_features=len(dcfg["dflash_config"]["target_layer_ids"]),
                               eps=dcfg["rms_norm_eps"], theta=_theta(dcfg))
        draft.load_state_dict({k: v.float() for k, v in load_file(str(folder / "draft" / "model.safetensors")).items()})
        return model.to(device).eval(), draft.to(device).eval(), dcfg

    def run(model, draft, dcfg, ids):
        block = dcfg["block_size"]
        tap = FeatureTap(model, dcfg["dflash_config"]["target_layer_ids"])
        logits = model(input_ids=ids).logits.float()
        anchors = torch.arange(seq // 2, seq - 1, device=ids.device).expand(ids.shape[0], -1).contiguous()
        noise, pos, _, _ = dd.block_inputs(ids, anchors, block, dcfg["dflash_config"]["mask_token_id"])
        mask = dd.block_mask(anchors, seq, block)
        hidden = draft(model.model.embed_tokens(noise), tap.features(), pos, mask)
        return logits, model.lm_head(hidden).float()

    small, small_draft, dcfg = load(pair)
    vocab = small.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, vocab, (rows, seq // 2), generator=g).to(device)
    for _ in range(seq - seq // 2):  # the target's own greedy text: where a drafter is judged
        ids = torch.cat([ids, small(input_ids=ids).logits[:, -1:].argmax(-1)], 1)
    ref_t, ref_d = run(small, small_draft, dcfg, ids)
    del small, small_draft
    wide, wide_draft, wdcfg = load(out)
    got_t, got_d = run(wide, wide_draft, wdcfg, ids)
    report = {}
    for name, ref, got in (("target", ref_t, got_t), ("draft", ref_d, got_d)):
        kept = got[..., :vocab]
        new_best = got[..., vocab:].max(-1).values
        report[name] = {"max_abs_diff": float((kept - ref).abs().max()), "logit_range": float(ref.abs().max()),
                        "argmax_agree": float((kept.argmax(-1) == ref.argmax(-1)).float().mean()),
                        MARGIN: float((new_best - kept.topk(min(TOP, vocab), -1).values[..., -1]).max())}
    return report


def _theta(cfg: dict) -> float:
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pair", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    for f in ("target/model.safetensors", "draft/model.safetensors", "manifest.json"):
        if not (a.pair / f).is_file():
            raise SystemExit(f"{a.pair / f} missing: run scripts/train/pair.py {a.pair} first")
    w = widen(a.pair, a.out, SHAPES[a.shape])
    print(json.dumps({"out": str(a.out), "shape": a.shape, "constant": w.k}), flush=True)
    if a.no_check:
        return
    report = check(a.pair, a.out, a.device)
    manifest = json.loads((a.out / "manifest.json").read_text())
    manifest["widened"]["check"] = report
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps(report), flush=True)
    bad = [n for n, r in report.items() if r["argmax_agree"] < 1.0 or r[MARGIN] >= 0]
    if bad:
        raise SystemExit(f"the widened {', '.join(bad)} does not compute what the pair does: {report}")


if __name__ == "__main__":
    main()
