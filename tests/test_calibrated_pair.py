"""The calibrated off-chain pair (scripts/offchain/calibrated_pair.py): the default oracle is unchanged
by the plan that parameterises it, the calibrated plan's weights do what it says under the plain-torch
forward, its DFLASH accepts 7.79 tokens per round over the ring, its draft's probabilities are its
rank frequencies, widening keeps what it computes, and bench_widened.sh builds it instead of training."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import torch

from scripts.bench import calibrated_tree
from scripts.offchain import acceptance, calibrated_pair, calibration, make_models, oracle
from scripts.offchain import reference as ref
from scripts.train import widen
from tests.test_bench_e2e import _stand_ins
from tests.test_offchain_oracle import rule_path

REPO = Path(__file__).resolve().parent.parent
MASK_ID = 3
PLAN = oracle.calibrated_plan()
RING = range(oracle.RING_START, oracle.RING_START + oracle.RING)
# sha256 of the default plan's ranks and logits and of both state dicts, from the oracle before it took a Plan
DEFAULT_DIGEST = "0e45458ea0c4c722e6942619b64570c1124c95c30cb89b0a4c764d0b5272a4f9"


def _prev(bonus: int) -> int:
    return oracle.RING_START + (bonus - oracle.RING_START - 1) % oracle.RING


@pytest.fixture(scope="module")
def weights() -> tuple[dict, dict]:
    return oracle.target_state_dict(PLAN), oracle.draft_state_dict(MASK_ID, PLAN)


def test_the_default_plan_is_todays_oracle_tensor_for_tensor() -> None:
    h = hashlib.sha256()
    ranks, logits = oracle._plan()
    for name, sd in (("plan", {"ranks": ranks, "logits": logits}), ("target", oracle.target_state_dict()),
                     ("draft", oracle.draft_state_dict(MASK_ID))):
        for k in sorted(sd):
            h.update(f"{name}.{k}".encode())
            h.update(sd[k].contiguous().numpy().tobytes())
    assert h.hexdigest() == DEFAULT_DIGEST
    assert oracle.draft_config({"dflash_config": {"mask_token_id": MASK_ID}})["block_size"] == oracle.BLOCK == 8


def test_calibrated_weights_follow_the_plan_under_the_plain_torch_forward(weights) -> None:
    """make_models' check (target greedy by its rule with margin >= 10, draft logits = plan within
    1e-3) on bonuses spread over the ring, block 16: 15 depths through 16 heads."""
    prompts = make_models.CHECK_PROMPTS + tuple([b, oracle.succ(b)] for b in RING[::9])
    assert make_models.check(*weights, MASK_ID, PLAN, prompts) == []
    assert PLAN.block == 16 and PLAN.depths == 15 and weights[1]["layers.0.self_attn.q_proj.weight"].shape[0] == 16 * 64


def test_dflash_accepts_the_published_7_79_over_the_ring() -> None:
    tokens = [len(acceptance.dflash_round(_prev(b), b, PLAN).emitted) for b in RING]
    assert abs(sum(tokens) / len(tokens) - 7.79) <= 0.05
    chain = calibration.chain_counts(PLAN.rank_probs[0], PLAN.depths, oracle.RING)
    assert sorted(tokens, reverse=True) == sorted([1 + sum(i < c for c in chain) for i in range(oracle.RING)],
                                                  reverse=True)


def test_the_drafts_probabilities_are_its_rank_frequencies() -> None:
    """Pooled over the ring and the depths: how often the truth has rank r = the draft's mean
    probability on its rank-r choice (bf16 eighths, the jitter and the truncated tail allow a few %
    where the ranks are frequent; 960 rows leave the rare ranks loose), and calibrated_tree.py's
    model (q, then (1 - q)(1 - a) a^(r - 1)) within 15 % (eighths of logits near 8 are 6 % steps)."""
    ranks, _ = oracle._plan(PLAN)
    probs = torch.stack([oracle.draft_logits(b, PLAN).double().softmax(-1) for b in RING])  # [ring, depth, V]
    for r in range(PLAN.candidates):
        tokens = torch.tensor([[oracle.plan_row(b, d, PLAN).tokens[r] for d in range(1, PLAN.depths + 1)] for b in RING])
        drafted = float(probs.gather(2, tokens[..., None]).mean())
        seen = float((ranks == r).double().mean())
        assert abs(drafted - seen) < (0.005 if r == 0 else 0.1 * seen if r <= 4 else 0.001 + 0.5 * seen), (r, drafted, seen)
        if r <= 4:
            assert abs(drafted / PLAN.draft_probs[r] - 1) < 0.15, (r, drafted)
    assert PLAN.draft_probs == calibration.draft_probs(PLAN.rank_probs[0], 0.8, 16)
    assert abs(calibrated_tree.chain_tau(PLAN.rank_probs[0], 15) - 7.79) < 1e-6


def test_ddtree_gains_with_the_budget_and_no_round_rests_on_a_near_tie() -> None:
    ring = calibrated_pair.ring_figures(PLAN)
    values = [ring[c] for c in calibrated_pair.CONFIGS]
    assert values == sorted(values) and values[-1] > values[0] + 1.5
    for bonus in RING[::7]:
        for budget in (32, 256):
            assert not oracle.ambiguous_budgets(*(t[bonus - oracle.RING_START] for t in oracle._plan(PLAN)), PLAN)
            base = acceptance.ddtree_round(_prev(bonus), bonus, budget, plan=PLAN).emitted
            noisy = oracle.draft_logits(bonus, PLAN)
            noisy = noisy + 1e-4 * torch.randn(noisy.shape, generator=torch.Generator().manual_seed(bonus)) * (noisy != 0)
            assert rule_path(acceptance.build_tree(noisy[None], budget), bonus, min(budget, PLAN.depths)) == base, \
                (bonus, budget)


def test_widening_keeps_the_targets_greedy_output_and_the_drafts_logits(weights) -> None:
    """scripts/train/widen.py's tensors at shape small-wide (4 x hidden), run by the plain-torch forward;
    the qwen3-8b shape maps the 16 heads too (Widener refuses shapes that cannot hold the pair)."""
    target, draft = weights
    cfg = oracle.target_config({"rms_norm_eps": 1e-6}, PLAN)
    w = widen.Widener(cfg, widen.SHAPES["small-wide"], target["model.embed_tokens.weight"])
    widen.Widener(cfg, widen.SHAPES["qwen3-8b"], target["model.embed_tokens.weight"])
    with pytest.raises(ValueError, match="not wider"):
        widen.Widener(cfg, widen.SHAPES["small"], target["model.embed_tokens.weight"])
    wide_t, wide_d = (ref.bf16_state(f(sd, w)) for f, sd in ((widen.widen_target, target), (widen.widen_draft, draft)))
    prompt = [70, 71]
    seq = prompt + oracle.continuation(prompt, 12)
    logits = ref.target_logits(wide_t, seq, list(range(len(seq))), ref.causal(len(seq)), oracle.TARGET_THETA,
                               widen.SHAPES["small-wide"].layers)
    assert logits[:, :oracle.VOCAB].argmax(-1)[1:-1].tolist() == seq[2:]
    assert float(logits[:, oracle.VOCAB:].max()) < -100
    feats = ref.context_features(wide_t, seq[:-1], oracle.TARGET_THETA, oracle.CAPTURE_LAYERS)
    drafted = ref.draft_logits(wide_d, wide_t, seq[-1], MASK_ID, len(seq) - 1, feats, oracle.DRAFT_THETA,
                               widen.SHAPES["small-wide"].draft_layers, PLAN.block)
    assert float((drafted[:, :oracle.VOCAB] - oracle.draft_logits(seq[-1], PLAN)).abs().max()) < 0.02


def test_bench_prompts_count_on_the_ring_and_keep_each_batch_near_the_ring() -> None:
    """The figures the manifest carries on a small stand-in: prompts are the rule's own text, and the
    greedy order picks the start nearest the ring's means first."""
    assert calibrated_pair.prompt(63)[:3] == [127, 64, 65] and len(calibrated_pair.prompt(0)) == calibrated_pair.PROMPT_LEN
    ring = {c: 2.0 for c in calibrated_pair.CONFIGS}
    starts = {c: [1.0, 2.5, 2.0, 3.0] + [2.0] * (oracle.RING - 4) for c in calibrated_pair.CONFIGS}
    assert calibrated_pair.bench_order(starts, ring)[0] == 2


def test_bench_widened_builds_the_calibrated_pair_instead_of_training(tmp_path: Path) -> None:
    env, calls = _stand_ins(tmp_path)
    python3 = tmp_path / "bin" / "python3"
    python3.write_text(python3.read_text().replace(
        'case "$1 $2" in\n',
        'case "$1 $2" in\n  "-m scripts.offchain.calibrated_pair") mkdir -p "$3" && echo \'{}\' > "$3/manifest.json" ;;\n'))
    env["PAIR_SOURCE"] = "calibrated"
    done = subprocess.run(["bash", str(REPO / "scripts" / "bench_widened.sh"), "--budgets", "16"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    assert lines[1] == f"{tmp_path / 'rig' / 'scripts' / 'make_models.py'} /tmp/models"
    assert lines[2] == f"-m scripts.offchain.calibrated_pair {tmp_path / 'pair'} --template /tmp/models"
    assert lines[3] == f"-m scripts.train.widen {tmp_path / 'pair'} {tmp_path / 'wide'} --no-check"
    assert lines[4].startswith(f"-m scripts.bench.e2e --pair {tmp_path / 'wide'} ") and not any("train.pair" in x for x in lines)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == {}


def test_the_bench_prompts_keep_the_ring_regime_from_batch_4_and_order_the_configs_at_batch_1() -> None:
    """The manifest's `bench` figures: what spec_accept_length should read on the first b prompts.
    A single prompt walks one cycle of bonuses, so batch 1 keeps only the order and the ratios to
    DFLASH (within 3 %); from batch 4 on every config is within 3 % of the ring's figure."""
    fig = calibrated_pair.figures(PLAN, 0.8)
    ring = fig["ring"]
    for batch in ("4", "16"):
        assert all(abs(fig["bench"][batch][c] / ring[c] - 1) < 0.03 for c in calibrated_pair.CONFIGS), batch
    one = fig["bench"]["1"]
    assert [one[c] for c in calibrated_pair.CONFIGS] == sorted(one.values())
    assert all(abs(one[c] / one["DFLASH"] / (ring[c] / ring["DFLASH"]) - 1) < 0.03 for c in calibrated_pair.CONFIGS)
    assert abs(ring["DFLASH"] - 7.79) <= 0.05 and abs(fig["model"]["DFLASH"] - 7.79) < 1e-3


def test_the_bench_report_says_the_pair_is_constructed_and_gives_its_analytic_figures(tmp_path: Path) -> None:
    from scripts.bench import e2e

    fig = {"ring": {"DFLASH": 7.7969, "DDTREE_b16": 7.8125}, "bench": {"1": {"DFLASH": 7.1111, "DDTREE_b16": 7.1111}}}
    manifest = {"plan": {"block": 16, "rank_probs": PLAN.rank_probs, "tail": 0.8, "dflash_tau": 7.79}, "figures": fig,
                "widened": {"shape": vars(widen.SHAPES["qwen3-8b"]), "head_dim": 64}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    first, second = e2e.pair_notes(tmp_path)
    assert "constructed by hand, not trained" in first and "accepts 7.7969 tokens per round" in first
    assert "hidden 4096" in first and "batch 1: DFLASH 7.1111, DDTREE_b16 7.1111" in second


def test_the_seed_settles_every_dflash_walk_on_one_cycle_near_7_79() -> None:
    """oracle.CALIBRATED_SEED's claim: from every ring bonus, DFLASH's walk (bonus -> bonus + tokens
    emitted) ends on the same cycle of 33 rounds over 4 laps of the ring (7.76 tokens per round)."""
    step = {b: len(acceptance.dflash_round(_prev(b), b, PLAN).emitted) for b in RING}
    cycles = set()
    for start in RING:
        seen, b = [], start
        while b not in seen:
            seen.append(b)
            b = oracle.RING_START + (b - oracle.RING_START + step[b]) % oracle.RING
        cycles.add(frozenset(seen[seen.index(b):]))
    (cycle,) = cycles
    assert len(cycle) == 33 and sum(step[b] for b in cycle) == 4 * oracle.RING


@pytest.mark.slow
def test_the_written_pair_loads_in_transformers_and_sglang(tmp_path: Path, release_site) -> None:
    """The written folders in a release's CPU venv (tests/cpu_serverargs/oracle_probe.py, as for the
    default oracle): transformers' Qwen3 follows the rule and needs the ancestor mask on a tree, SGLang
    parses the 16-block draft and its 16 heads, every weight name is used."""
    import os

    from kernels import build_tree
    from tests.cpu_serverargs.venv_builder import ensure_venv
    from tests.sglang_releases import release_metadata

    site = release_site("0.5.15")
    python = ensure_venv("0.5.15", release_metadata(site, "0.5.15"))
    gpurig = next((d / "shared" / "gpurig" / "models" for d in (REPO.parent, REPO.parent.parent)
                   if (d / "shared" / "gpurig" / "models").is_dir()), REPO / "shared" / "gpurig" / "models")
    if not (gpurig / "target" / "config.json").exists():
        pytest.skip(f"no gpurig model templates at {gpurig}")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}
    pair = tmp_path / "pair"
    made = subprocess.run([str(python), "-m", "scripts.offchain.calibrated_pair", str(pair), "--template", str(gpurig)],
                          capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    assert made.returncode == 0, made.stderr[-4000:]
    manifest = json.loads((pair / "manifest.json").read_text())
    assert manifest["sha256"]["draft/model.safetensors"] == hashlib.sha256(
        (pair / "draft" / "model.safetensors").read_bytes()).hexdigest()
    assert len(json.loads((pair / "prompts.json").read_text())) == oracle.RING
    probe_dir = tmp_path / "probe"  # the probe reads the default oracle's folder names
    probe_dir.mkdir()
    (probe_dir / "target_offchain").symlink_to(pair / "target")
    (probe_dir / "draft_offchain").symlink_to(pair / "draft")
    context = [40, 41, 70, 71]
    bonus = oracle.target_next(context[-2], context[-1])
    tree = build_tree(oracle.draft_logits(bonus, PLAN)[None], 32)
    tokens = tree.tokens[0].tolist()
    tokens[0] = bonus
    prompts = [[70, 71], [127, 64], calibrated_pair.prompt(5)[:40]]
    case = {"prompts": prompts, "max_new": 24,
            "tree": {"context": context, "tokens": tokens, "parent": tree.parent[0].tolist(), "depth": tree.depth[0].tolist()}}
    done = subprocess.run([str(python), str(REPO / "tests" / "cpu_serverargs" / "oracle_probe.py"), str(probe_dir),
                           json.dumps(case)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["outputs"] == [oracle.continuation(p, 24) for p in prompts]
    want = [oracle.target_next(context[-1] if q < 0 else tokens[q], -1) for q in tree.parent[0].tolist()]
    assert report["tree_ancestor"] == want and report["tree_causal"] != want
    assert report["draft"] == {"block_size": 16, "mask_token_id": manifest["mask_token_id"],
                               "target_layer_ids": oracle.CAPTURE_LAYERS}
    assert report["key_mismatch"] == {"target_missing": [], "target_unused": [], "draft_missing": [], "draft_unused": []}
    heads = [oracle.HIDDEN, 16, 16, oracle.HEAD_DIM]
    assert report["sglang_model_config"] == {"target": ["Qwen3ForCausalLM", *heads, oracle.VOCAB],
                                             "draft": ["DFlashDraftModel", *heads, oracle.DRAFT_LAYERS]}
