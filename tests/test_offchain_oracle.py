"""The off-chain oracle (scripts/offchain/oracle.py): its weights do what the plan says under the
model math, its DDTree accepted paths leave the first-child chain, and the analytic acceptance
follows the worker's own tree build and walk. The slow test loads the written files with
transformers' Qwen3 and SGLang's DFlash config parser in a release's CPU venv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from kernels import build_tree
from kernels.tree_mask import ancestor_matrix_torch
from scripts.offchain import acceptance, oracle
from scripts.offchain import reference as ref

REPO = Path(__file__).resolve().parent.parent

MASK_ID = 3
PROMPTS = [[70, 71], [5, 17, 33, 99, 100], list(range(64, 90)), [300, 301], [127, 64]]
BUDGETS = (4, 8, 16, 32, 64)


@pytest.fixture(scope="module")
def target() -> dict:
    return ref.bf16_state(oracle.target_state_dict())


@pytest.fixture(scope="module")
def draft() -> dict:
    return ref.bf16_state(oracle.draft_state_dict(MASK_ID))


def test_successor_is_a_bijection_on_the_ring_and_maps_everything_into_it() -> None:
    ring = range(oracle.RING_START, oracle.RING_START + oracle.RING)
    assert sorted(oracle.succ(x) for x in ring) == list(ring)
    assert all(oracle.succ(x) in ring for x in range(oracle.VOCAB))


def test_continuation_counts_after_two_ring_neighbours_and_refuses_one_token() -> None:
    assert oracle.continuation([70, 71], 3) == [72, 73, 74]
    assert oracle.continuation([126, 127], 2) == [64, 65]
    with pytest.raises(ValueError, match="at least 2 tokens"):
        oracle.continuation([70], 1)


@pytest.mark.parametrize("prompt", [[5, 17, 70, 71], [300, 301], [127, 64], [9, 200]])
def test_target_greedy_follows_two_back_plus_two_with_big_margins(target: dict, prompt: list[int]) -> None:
    seq = prompt + oracle.continuation(prompt, 12)
    logits = ref.target_logits(target, seq, list(range(len(seq))), ref.causal(len(seq)), oracle.TARGET_THETA,
                               oracle.TARGET_LAYERS)
    top = logits.topk(2, dim=-1)
    assert top.indices[1:-1, 0].tolist() == [oracle.target_next(seq[i - 1], seq[i]) for i in range(1, len(seq) - 1)]
    assert float((top.values[1:, 0] - top.values[1:, 1]).min()) > 20


def test_positional_heads_are_sharp_in_the_bf16_weights(target: dict, draft: dict) -> None:
    """Attention logits (q.k / 8 after norms and RoPE) peak where planned, 20+ above anything else."""
    def scores(sd, prefix, theta, head, q_pos, k_pos):
        x = torch.zeros(1, oracle.HIDDEN)
        x[0, 70] = 1.0  # a normalised token embedding; the heads ignore which token
        q = ref.rms_norm((x @ sd[prefix + "self_attn.q_proj.weight"].T).view(1, -1, 64)[:, head],
                         sd[prefix + "self_attn.q_norm.weight"])
        k = ref.rms_norm((x @ sd[prefix + "self_attn.k_proj.weight"].T).view(1, -1, 64)[:, head],
                         sd[prefix + "self_attn.k_norm.weight"])
        qr = ref.rope(q[None].expand(len(q_pos), 1, 64), torch.tensor(q_pos), theta)[:, 0]
        kr = ref.rope(k[None].expand(len(k_pos), 1, 64), torch.tensor(k_pos), theta)[:, 0]
        return (qr @ kr.T) / 8

    s = scores(target, "model.layers.0.", oracle.TARGET_THETA, 0, [1000], list(range(1001)))[0]
    assert float(s[999] - torch.cat([s[:999], s[1000:]]).max()) > 25  # previous token, over 1000 positions
    for depth in range(1, oracle.DEPTHS + 1):
        block = list(range(500, 500 + oracle.BLOCK))
        s = scores(draft, "layers.0.", oracle.DRAFT_THETA, depth, block[1:], block)
        for i in range(1, oracle.BLOCK):
            others = [float(s[i - 1, j]) for j in range(oracle.BLOCK) if i - j != depth]
            assert max(others) < -20, (depth, i)  # below the context keys' 0
            if i >= depth:
                assert float(s[i - 1, i - depth]) > 20


@pytest.mark.parametrize("prompt", [[5, 17, 70, 71], list(range(64, 104)), [127, 64]])
def test_draft_logits_are_exactly_the_plan(target: dict, draft: dict, prompt: list[int]) -> None:
    """SGLang's DFlash draft math on the weights gives the planned logits: the true token bonus+k at
    its planned rank at depth k, two decoys, 0 elsewhere (bf16-exact)."""
    feats = ref.context_features(target, prompt[:-1], oracle.TARGET_THETA, oracle.CAPTURE_LAYERS)
    logits = ref.draft_logits(draft, target, prompt[-1], MASK_ID, len(prompt) - 1, feats, oracle.DRAFT_THETA,
                              oracle.DRAFT_LAYERS)
    planned = oracle.draft_logits(prompt[-1])
    assert float((logits - planned).abs().max()) < 1e-6  # attention leaks ~1e-11 elsewhere
    bonus, true = prompt[-1], prompt[-1]
    for depth in range(1, oracle.DEPTHS + 1):
        true = oracle.succ(true)
        row = oracle.plan_row(bonus, depth)
        assert logits[depth - 1, list(row.tokens)].tolist() == list(row.logits)
        order = logits[depth - 1].argsort(descending=True)[:3].tolist()
        assert order == list(row.tokens) and order.index(true) == row.true_rank


def test_plan_mixes_ranks_per_depth_and_per_bonus() -> None:
    ranks = torch.tensor([[oracle.plan_row(b, d).true_rank for d in range(1, oracle.DEPTHS + 1)]
                          for b in range(oracle.RING_START, oracle.RING_START + oracle.RING)])
    for depth in range(oracle.DEPTHS):
        assert set(ranks[:, depth].tolist()) == {0, 1, 2}
    assert len({tuple(r) for r in ranks.tolist()}) > oracle.RING // 2
    with pytest.raises(ValueError, match="outside the ring"):
        oracle.plan_row(5, 1)


def test_four_squares() -> None:
    for n in (0, 1, 7, 61440, 12345):
        assert sum(x * x for x in oracle.four_squares(n)) == n


def _pred(token: int) -> int:
    """The ring token before `token`."""
    return next(x for x in range(oracle.RING_START, oracle.RING_START + oracle.RING) if oracle.succ(x) == token)


def _tree_case(bonus: int, budget: int):
    tree = build_tree(oracle.draft_logits(bonus)[None], budget)
    tokens = tree.tokens[0].tolist()
    tokens[0] = bonus
    return tree, tokens


def test_tree_verify_needs_the_ancestor_mask(target: dict) -> None:
    """Over the context + a real best-first tree (depth positions), the target's argmax at every node
    is two back (the parent) plus two with the ancestor mask; a causal mask in node order changes it."""
    context = [40, 41, 70, 71]
    bonus = oracle.target_next(context[-2], context[-1])
    tree, tokens = _tree_case(bonus, 16)
    parent, depth = tree.parent[0].tolist(), tree.depth[0].tolist()
    n, p = len(tokens), len(context)
    visible = torch.zeros(p + n, p + n, dtype=torch.bool)
    visible[:p, :p] = ref.causal(p)
    visible[p:, :p] = True
    positions = list(range(p)) + [p + d for d in depth]
    want = [oracle.target_next(context[-1] if q < 0 else tokens[q], -1) for q in parent]

    def argmax(block: torch.Tensor) -> list[int]:
        visible[p:, p:] = block
        logits = ref.target_logits(target, context + tokens, positions, visible, oracle.TARGET_THETA,
                                   oracle.TARGET_LAYERS)
        return logits[p:].argmax(-1).tolist()

    assert argmax(ancestor_matrix_torch(tree.parent)[0]) == want
    assert argmax(ref.causal(n)) != want


def test_ddtree_round_follows_a_hand_walk() -> None:
    """Accepted tokens = the longest path of tree nodes whose tokens follow the true chain."""
    bonus = 80
    for budget in BUDGETS:
        tree, tokens = _tree_case(bonus, budget)
        parent = tree.parent[0].tolist()
        node, path = 0, []
        while True:
            kids = [c for c in range(1, len(tokens)) if parent[c] == node and tokens[c] == oracle.succ(tokens[node])]
            if not kids or len(path) == min(budget, oracle.DEPTHS):
                break
            node = kids[0]
            path.append(node)
        outcome = acceptance.ddtree_round(_pred(bonus), bonus, budget)
        assert list(outcome.emitted[:-1]) == [tokens[c] for c in path]
        assert outcome.emitted[-1] == oracle.succ(tokens[node])


def test_dflash_round_accepts_the_leading_first_choices() -> None:
    for bonus in range(oracle.RING_START, oracle.RING_START + oracle.RING):
        lead = 0
        while lead < oracle.DEPTHS and oracle.plan_row(bonus, lead + 1).true_rank == 0:
            lead += 1
        assert len(acceptance.dflash_round(_pred(bonus), bonus).emitted) == lead + 1


def test_ddtree_beats_dflash_and_leaves_the_chain_at_every_budget() -> None:
    dflash = acceptance.expected_acceptance(PROMPTS, 64, "DFLASH")
    assert dflash["off_chain_rounds"] == 0
    previous = 0.0
    for budget in BUDGETS:
        got = acceptance.expected_acceptance(PROMPTS, 64, "DDTREE", budget)
        assert got["mean"] > dflash["mean"] * 1.1, (budget, got, dflash)
        assert got["mean"] >= previous
        assert got["off_chain_rounds"] > got["rounds"] // 5 and got["kv_move_rounds"] > 0
        previous = got["mean"]


def rule_path(tree, bonus: int, limit: int) -> tuple[int, ...]:
    """What a round emits on `tree` (root = `bonus`), walked apart from acceptance.py: down the child that holds
    the rule's next token, at most `limit` nodes, then the token after the last."""
    tokens = tree.tokens[0].tolist()
    tokens[0] = bonus
    node, out = 0, []
    while len(out) < limit:
        want = oracle.succ(tokens[node])
        kids = [c for c in range(1, len(tokens)) if tree.parent[0, c] == node and tokens[c] == want]
        if not kids:
            break
        node = kids[0]
        out.append(tokens[node])
    return tuple(out) + (oracle.succ(tokens[node]),)


def test_acceptance_is_not_decided_by_a_near_tie() -> None:
    """Each round's accepted path is the same when the draft logits move by 1e-4 (far more than the
    lse rounding between Triton and torch), so the GPU's tree equals the reference's."""
    g = torch.Generator().manual_seed(0)
    for bonus in range(oracle.RING_START, oracle.RING_START + oracle.RING):
        logits = oracle.draft_logits(bonus)
        for budget in BUDGETS:
            base = acceptance.ddtree_round(_pred(bonus), bonus, budget).emitted
            for _ in range(2):
                noisy = logits + (torch.rand(logits.shape, generator=g) - 0.5) * 2e-4 * (logits != 0)
                assert rule_path(build_tree(noisy[None], budget), bonus, min(budget, oracle.DEPTHS)) == base, \
                    (bonus, budget)


@pytest.mark.slow
def test_written_files_load_in_transformers_and_sglang(tmp_path: Path, release_site) -> None:
    from tests.cpu_serverargs.venv_builder import ensure_venv
    from tests.sglang_releases import release_metadata

    site = release_site("0.5.15")
    python = ensure_venv("0.5.15", release_metadata(site, "0.5.15"))
    gpurig = REPO.parent.parent / "shared" / "gpurig" / "models"
    if not (gpurig / "target" / "config.json").exists():
        pytest.skip(f"no gpurig model templates at {gpurig}")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}
    made = subprocess.run([str(python), "-m", "scripts.offchain.make_models", str(tmp_path), "--template", str(gpurig)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert made.returncode == 0, made.stderr[-4000:]
    context = [40, 41, 70, 71]
    bonus = oracle.target_next(context[-2], context[-1])
    tree, tokens = _tree_case(bonus, 16)
    case = {"prompts": PROMPTS, "max_new": 24,
            "tree": {"context": context, "tokens": tokens, "parent": tree.parent[0].tolist(),
                     "depth": tree.depth[0].tolist()}}
    done = subprocess.run([str(python), str(REPO / "tests" / "cpu_serverargs" / "oracle_probe.py"), str(tmp_path),
                           json.dumps(case)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["outputs"] == [oracle.continuation(p, 24) for p in PROMPTS]
    want = [oracle.target_next(context[-1] if q < 0 else tokens[q], -1) for q in tree.parent[0].tolist()]
    assert report["tree_ancestor"] == want
    assert report["tree_causal"] != want
    assert report["draft"] == {"block_size": oracle.BLOCK, "mask_token_id": MASK_ID,
                               "target_layer_ids": oracle.CAPTURE_LAYERS}
    assert report["key_mismatch"] == {"target_missing": [], "target_unused": [], "draft_missing": [], "draft_unused": []}
    heads = [oracle.HIDDEN, oracle.HEADS, oracle.HEADS, oracle.HEAD_DIM]
    assert report["sglang_model_config"] == {"target": ["Qwen3ForCausalLM", *heads, oracle.VOCAB],
                                             "draft": ["DFlashDraftModel", *heads, oracle.DRAFT_LAYERS]}
