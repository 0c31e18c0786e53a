"""The off-chain oracle: a hand-built Qwen3 target and DFlash draft whose DDTree accepted paths leave
the first-child chain, with every logit known in advance.

Target ("two back, plus two"): the next token is `succ(succ(x[t-1]))`, where `succ` is the successor on
a ring of RING tokens (and maps every other id into the ring). On a sequence whose last two tokens
are ring neighbours this is plain counting, b -> b+1 -> b+2 ...; but the target reads the token two
back through a previous-token attention head (RoPE), so a tree node sees the right token only
through its parent: a wrong tree mask or a wrong KV move changes its output.
  hidden = 1024 = token one-hot (dims 0..511, scale ALPHA) + previous-token one-hot (dims 512..1023,
  written by layer 0's attention, scale GAMMA); lm_head reads only the second half; layers 1..3 and
  every MLP are zero. Correct logit 22.6, every other logit 0 (attention leaks < 1e-9).

Draft (SGLang's DFlashDraftModel: layers over `[bonus, MASK x 7]` embeddings, attending to the
context KV that it builds from the target's hidden features, then the target's lm_head): `fc` is
zero, so the context keys and values are zero. Head k (k = 1..7) of layer 0 attends, through RoPE,
to the block token k positions back: at block position k that is the bonus, elsewhere a MASK (value
0) or nothing (the context wins, value 0). Its value is the bonus's ring one-hot, and `o_proj` maps
(bonus, depth k) to a hidden vector whose lm_head logits are exactly the planned candidates of
`plan_row(bonus, k)`: the true token (bonus + k) at a seeded rank 0, 1 or 2, two decoys, and logit 0
everywhere else. Filler dimensions (not read by the lm_head) fix the final RMS at 1, so the logits
are exact bf16 values.

A `Plan` parameterises the draft (block and heads, the true token's rank frequencies, the draft's
planned probabilities); the default is the oracle described above, `calibrated_plan()` a 15-depth
drafter calibrated to DFLASH's published 7.79 tokens per round (scripts/offchain/calibrated_pair.py).

Pure torch; `scripts/offchain/make_models.py` writes the files, `scripts/offchain/acceptance.py` predicts acceptance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from scripts.offchain import calibration

VOCAB = 512
HIDDEN = 2 * VOCAB  # token one-hot | previous-token one-hot
HEAD_DIM = 64
HEADS = 8  # target: 8 x 64 = 512 value dims carry the previous token's one-hot
BLOCK = 8  # DFlash block: bonus + 7 masks, so DDTree drafts 7 depths
DEPTHS = BLOCK - 1
INTERMEDIATE = 64  # every MLP is zero; kept tiny
TARGET_LAYERS, DRAFT_LAYERS = 4, 2
CAPTURE_LAYERS = [1, 2]  # target layers whose hidden states DFlash captures (the draft ignores them)
RING_START, RING = 64, 64  # generated tokens live in ids 64..127
ALPHA = 8.0  # token embedding scale
GAMMA = 8.0  # previous-token write scale
NORM_IN = 1.0 / 32.0  # input_layernorm weight: RMSNorm(ALPHA e_x) * NORM_IN = e_x (HIDDEN = 1024)
TARGET_THETA, TARGET_PAIRS, TARGET_QK_GAIN = 10.0, tuple(range(8)), 3.5
DRAFT_THETA, DRAFT_PAIRS, DRAFT_CONST_PAIR, DRAFT_QK_GAIN = 1e6, tuple(range(4)), 31, 8.0
FILLER_DIMS = (56, 57, 58, 59)  # token-half dims of the draft output: set its RMS, unread by the lm_head
RANK_PROBS = (0.45, 0.4, 0.15)  # how often the true token is the draft's 1st / 2nd / 3rd choice
SEED = 20261201


def succ(x: int) -> int:
    """Ring successor; ids outside the ring map into it."""
    if RING_START <= x < RING_START + RING:
        return RING_START + (x - RING_START + 1) % RING
    return RING_START + x % RING


def target_next(prev: int, last: int) -> int:
    """The target's greedy next token after `... prev, last`: two back, plus two."""
    del last
    return succ(succ(prev))


def continuation(prompt: list[int], n: int) -> list[int]:
    """The target's greedy output: `n` tokens after `prompt` (at least 2 tokens)."""
    if len(prompt) < 2:
        raise ValueError("the off-chain oracle needs prompts of at least 2 tokens (it reads two back)")
    seq = list(prompt)
    for _ in range(n):
        seq.append(target_next(seq[-2], seq[-1]))
    return seq[len(prompt):]


@dataclass(frozen=True)
class Row:
    """The draft's planned candidates at one (bonus, depth): tokens and logits in rank order."""

    tokens: tuple[int, ...]
    logits: tuple[float, ...]
    true_rank: int


MAX_BUDGET_CHECKED = 64
TIE_TOLERANCE = 1e-3  # far above the lse rounding differences between Triton and torch (~1e-6)


@dataclass(frozen=True)
class Plan:
    """What the draft says at every (ring bonus, depth), and the heads that carry it. The default is
    the oracle the GPU matrix serves (7 depths, 3 candidates, seeded logits); `calibrated_plan` is a
    drafter of a published DFLASH strength (scripts/offchain/calibration.py)."""

    block: int = BLOCK  # DFlash block: bonus + block - 1 masks; the draft head of depth k is head k
    heads: int = HEADS  # query / KV heads of every layer (target and draft): at least `block`
    rank_probs: tuple[float, ...] = RANK_PROBS  # how often the true token is the draft's 1st, 2nd, ... choice
    draft_probs: tuple[float, ...] | None = None  # planned probability per rank; None: seeded eighths
    checked_budgets: tuple[int, ...] = tuple(range(1, MAX_BUDGET_CHECKED + 1))  # tie-free at these budgets
    seed: int = SEED

    @property
    def depths(self) -> int:
        return self.block - 1

    @property
    def candidates(self) -> int:
        return len(self.rank_probs)


DEFAULT = Plan()
CALIBRATED_BUDGETS = (16, 32, 64, 128, 256)  # the budgets the calibrated pair is benched at
# A generated sequence walks the ring bonus -> bonus + tokens emitted, so every request settles on a
# short cycle of bonuses, and a bench reads that cycle's mean, not the ring's. This seed is the first
# of SEED + 16 + n (n < 3000) whose DFLASH walk from every ring bonus settles on one cycle within 0.06
# of 7.79 (33 rounds, 4 laps: 7.76); DDTREE's walks still settle on their own cycles (calibrated_pair).
CALIBRATED_SEED = SEED + 16 + 2929


def calibrated_plan(dflash_tau: float = 7.79, tail: float = 0.8, candidates: int = 16, block: int = 16) -> Plan:
    """A drafter whose chain accepts `dflash_tau` tokens per round at `block`, calibrated (module
    docstring of scripts/offchain/calibration.py); 16 heads carry its 15 depths."""
    ranks, probs = calibration.fit(dflash_tau, block - 1, tail, candidates)
    return Plan(block=block, heads=block, rank_probs=ranks, draft_probs=probs,
                checked_budgets=tuple(range(1, 33)) + CALIBRATED_BUDGETS[2:], seed=CALIBRATED_SEED)


def _draw_rows(g: torch.Generator, plan: Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """One bonus's rows: the true token's rank per depth and the three candidate logits (exact
    multiples of 1/8, so bf16-exact and their squares sum to a multiple of 1/64)."""
    ranks = torch.multinomial(torch.tensor(plan.rank_probs), plan.depths, replacement=True, generator=g)
    eighths = torch.randint(0, 8, (plan.depths, 3), generator=g).double() / 8
    top = 6.0 + eighths[:, 0]  # 6 .. 6.875
    second = top - (0.5 + 2 * eighths[:, 1])  # gap 0.5 .. 2.25
    third = second - (0.25 + eighths[:, 2])  # gap 0.25 .. 1.125
    return ranks, torch.stack([top, second, third], dim=1)


def _best_scores(lp: list[list[float]], k: int, count: int) -> list[float]:
    """The `count` best prefix scores (sums of per-depth log-probs, ranks < k), best first."""
    import heapq

    heap = [(-lp[0][0], 0, 0, 0.0)]  # (-score, depth index, rank, parent score)
    out = []
    while heap and len(out) < count:
        neg, d, r, parent = heapq.heappop(heap)
        out.append(-neg)
        if r + 1 < min(k, len(lp[d])):
            heapq.heappush(heap, (-(parent + lp[d][r + 1]), d, r + 1, parent))
        if d + 1 < len(lp):
            heapq.heappush(heap, (neg - lp[d + 1][0], d + 1, 0, -neg))
    return out


def ambiguous_budgets(ranks: torch.Tensor, logits: torch.Tensor, plan: Plan = DEFAULT) -> list[int]:
    """Budgets (of plan.checked_budgets) at which a true-path prefix scores within TIE_TOLERANCE of
    the tree's cut-off: there, rounding alone would decide the accepted length."""
    lp = []
    for row in logits.tolist():
        lse = math.log(sum(math.exp(v) for v in row) + (VOCAB - len(row)))
        lp.append([v - lse for v in row] + [-lse] * (max(plan.checked_budgets) - len(row)))
    true_scores = [sum(lp[d][int(ranks[d])] for d in range(n)) for n in range(1, len(lp) + 1)]
    bad = []
    for budget in plan.checked_budgets:
        best = _best_scores(lp, budget, budget + 1)
        if len(best) <= budget:
            continue
        low, high = best[budget - 1] - TIE_TOLERANCE, best[budget] + TIE_TOLERANCE
        if any(low <= t <= high for t in true_scores):
            bad.append(budget)
    return bad


def _calibrated_rows(g: torch.Generator, plan: Plan) -> torch.Tensor:
    """One bonus's candidate logits under a calibrated plan: its planned logits, jittered."""
    logits = calibration.planned_logits(plan.draft_probs, VOCAB)
    return torch.tensor([calibration.jittered(logits, g) for _ in range(plan.depths)], dtype=torch.float64)


@lru_cache(maxsize=4)
def _plan(plan: Plan = DEFAULT) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded per (ring bonus, depth): the true token's rank and the candidate logits. A bonus whose
    rows leave a true-path prefix on a tie at some budget's cut-off is drawn again (its logits only,
    under a calibrated plan, whose ranks are assigned once: calibration.rank_table)."""
    g = torch.Generator().manual_seed(plan.seed)
    ranks = torch.zeros(RING, plan.depths, dtype=torch.int64)
    logits = torch.zeros(RING, plan.depths, plan.candidates, dtype=torch.float64)
    if plan.draft_probs is not None:
        ranks = calibration.rank_table(plan.rank_probs, plan.depths, RING, plan.seed)
    for b in range(RING):
        for _ in range(100):
            if plan.draft_probs is None:
                ranks[b], logits[b] = _draw_rows(g, plan)
            else:
                logits[b] = _calibrated_rows(g, plan)
            if not ambiguous_budgets(ranks[b], logits[b], plan):
                break
        else:
            raise RuntimeError(f"no tie-free draft rows for ring bonus {RING_START + b} in 100 draws")
    return ranks, logits


def plan_row(bonus: int, depth: int, plan: Plan = DEFAULT) -> Row:
    """Candidates at `depth` (1..plan.depths) after ring token `bonus`: the true token bonus+depth at its rank."""
    if not RING_START <= bonus < RING_START + RING:
        raise ValueError(f"bonus {bonus} is outside the ring {RING_START}..{RING_START + RING - 1}")
    ranks, logits = _plan(plan)
    b, d = bonus - RING_START, depth - 1
    true = bonus
    for _ in range(depth):
        true = succ(true)
    decoys = [RING_START + (true - RING_START + RING // 2 + 5 * j) % RING for j in range(plan.candidates - 1)]
    r = int(ranks[b, d])
    tokens = decoys[:r] + [true] + decoys[r:]
    return Row(tuple(tokens), tuple(float(v) for v in logits[b, d]), r)


def draft_logits(bonus: int, plan: Plan = DEFAULT) -> torch.Tensor:
    """The draft's logits [depths, VOCAB] (float32) for a round whose bonus is `bonus`."""
    out = torch.zeros(plan.depths, VOCAB)
    for d in range(1, plan.depths + 1):
        row = plan_row(bonus, d, plan)
        out[d - 1, list(row.tokens)] = torch.tensor(row.logits)
    return out


# --- RoPE heads --------------------------------------------------------------------------------

def rope_freqs(theta: float) -> torch.Tensor:
    """Per-pair angular frequencies, as SGLang / HF compute them (neox pairs p, p + 32)."""
    return 1.0 / theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)


def positional_margin(theta: float, pairs: tuple[int, ...], offsets: range) -> float:
    """min over n in offsets, n != 0, of mean_p (1 - cos(w_p n)): how sharply the heads peak."""
    w = rope_freqs(theta)[list(pairs)]
    n = torch.tensor([o for o in offsets if o != 0], dtype=torch.float64)
    return float((1 - torch.cos(w[:, None] * n[None, :])).mean(0).min())


def qk_vectors(theta: float, pairs: tuple[int, ...], peak: int, const_pair: int | None = None,
               const_share: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-norm q and k head vectors (RMS 1) whose RoPE dot product is
    64 * [(1 - const_share) * mean_p cos(w_p (peak - delta)) - const_share], delta = q pos - k pos."""
    w = rope_freqs(theta)
    q, k = torch.zeros(HEAD_DIM, dtype=torch.float64), torch.zeros(HEAD_DIM, dtype=torch.float64)
    amp = math.sqrt(HEAD_DIM * (1 - const_share) / len(pairs))
    for p in pairs:
        phase = peak * float(w[p])
        q[p], k[p], k[p + HEAD_DIM // 2] = amp, amp * math.cos(phase), amp * math.sin(phase)
    if const_pair is not None:
        amp = math.sqrt(HEAD_DIM * const_share)
        q[const_pair], k[const_pair] = amp, -amp
    return q, k


def draft_const_share(plan: Plan = DEFAULT) -> float:
    """Share of the constant pair that centres the draft heads' scores on 0 (peak +M, rest <= -M)."""
    depths = plan.depths
    m = positional_margin(DRAFT_THETA, DRAFT_PAIRS, range(-depths - (depths - 1), depths))
    return (1 - m / 2) / (2 - m / 2)


# --- weights -----------------------------------------------------------------------------------

def _zero_layer(prefix: str, heads: int, kv_heads: int) -> dict[str, torch.Tensor]:
    z = torch.zeros
    return {
        f"{prefix}input_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}post_attention_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}self_attn.q_proj.weight": z(heads * HEAD_DIM, HIDDEN),
        f"{prefix}self_attn.k_proj.weight": z(kv_heads * HEAD_DIM, HIDDEN),
        f"{prefix}self_attn.v_proj.weight": z(kv_heads * HEAD_DIM, HIDDEN),
        f"{prefix}self_attn.o_proj.weight": z(HIDDEN, heads * HEAD_DIM),
        f"{prefix}self_attn.q_norm.weight": torch.ones(HEAD_DIM),
        f"{prefix}self_attn.k_norm.weight": torch.ones(HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": z(INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.up_proj.weight": z(INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.down_proj.weight": z(HIDDEN, INTERMEDIATE),
    }


def embedding() -> torch.Tensor:
    return ALPHA * torch.eye(VOCAB, HIDDEN)


def lm_head() -> torch.Tensor:
    """Logit of y = the previous-token half at every x with succ(succ(x)) = y."""
    w = torch.zeros(VOCAB, HIDDEN)
    for x in range(VOCAB):
        w[succ(succ(x)), VOCAB + x] = 1.0
    return w


def target_state_dict(plan: Plan = DEFAULT) -> dict[str, torch.Tensor]:
    """HF Qwen3ForCausalLM names, float32 (the writer casts to bf16). Heads past the first
    VOCAB / HEAD_DIM read the previous token too but carry no value."""
    heads = plan.heads
    sd = {"model.embed_tokens.weight": embedding(), "model.norm.weight": torch.ones(HIDDEN),
          "lm_head.weight": lm_head()}
    for i in range(TARGET_LAYERS):
        sd.update(_zero_layer(f"model.layers.{i}.", heads, heads))
    p = "model.layers.0."
    sd[p + "input_layernorm.weight"] = torch.full((HIDDEN,), NORM_IN)
    q, k = qk_vectors(TARGET_THETA, TARGET_PAIRS, peak=1)
    rows = slice(0, VOCAB)  # token half only: the query / key do not depend on the token
    sd[p + "self_attn.q_proj.weight"][:, rows] = q.float().repeat(heads)[:, None]
    sd[p + "self_attn.k_proj.weight"][:, rows] = k.float().repeat(heads)[:, None]
    sd[p + "self_attn.v_proj.weight"][:, :VOCAB] = torch.eye(heads * HEAD_DIM, VOCAB)
    sd[p + "self_attn.o_proj.weight"][VOCAB:, :] = GAMMA * torch.eye(VOCAB, heads * HEAD_DIM)
    sd[p + "self_attn.q_norm.weight"] = torch.full((HEAD_DIM,), TARGET_QK_GAIN)
    sd[p + "self_attn.k_norm.weight"] = torch.full((HEAD_DIM,), TARGET_QK_GAIN)
    return sd


def four_squares(n: int) -> tuple[int, int, int, int]:
    """Non-negative integers a >= b >= c >= d with a² + b² + c² + d² = n (Lagrange)."""
    for a in range(math.isqrt(n), -1, -1):
        for b in range(min(a, math.isqrt(n - a * a)), -1, -1):
            rest = n - a * a - b * b
            for c in range(min(b, math.isqrt(rest)), -1, -1):
                d = math.isqrt(rest - c * c)
                if d <= c and d * d == rest - c * c:
                    return a, b, c, d
    raise AssertionError(n)


def draft_output_vector(bonus: int, depth: int, mask_id: int, plan: Plan = DEFAULT) -> torch.Tensor:
    """What head `depth` adds to the residual at block position `depth`: the planned logits on the
    previous-token half at the ring pre-images of the candidates, plus fillers making the final
    RMS exactly 1 (sum of squares = HIDDEN) so that the normalised logits are the planned ones."""
    row = plan_row(bonus, depth, plan)
    v = torch.zeros(HIDDEN, dtype=torch.float64)
    for token, logit in zip(row.tokens, row.logits):
        pre = next(x for x in range(RING_START, RING_START + RING) if succ(succ(x)) == token)
        v[VOCAB + pre] = logit
    if mask_id in FILLER_DIMS:
        raise ValueError(f"mask token id {mask_id} collides with the filler dims {FILLER_DIMS}")
    rest64 = round(64 * (HIDDEN - ALPHA**2 - float((v * v).sum())))  # logits are multiples of 1/8
    for dim, a in zip(FILLER_DIMS, four_squares(rest64)):
        v[dim] = a / 8
    return v


def draft_state_dict(mask_id: int, plan: Plan = DEFAULT) -> dict[str, torch.Tensor]:
    """SGLang DFlashDraftModel names (`layers.*`, `fc`, `hidden_norm`, `norm`), float32."""
    if plan.heads < plan.block:
        raise ValueError(f"{plan.depths} depths need {plan.block} heads (head k drafts depth k), not {plan.heads}")
    sd = {"norm.weight": torch.ones(HIDDEN), "hidden_norm.weight": torch.ones(HIDDEN),
          "fc.weight": torch.zeros(HIDDEN, len(CAPTURE_LAYERS) * HIDDEN)}
    for i in range(DRAFT_LAYERS):
        sd.update(_zero_layer(f"layers.{i}.", plan.heads, plan.heads))
    p = "layers.0."
    sd[p + "input_layernorm.weight"] = torch.full((HIDDEN,), NORM_IN)
    share = draft_const_share(plan)
    for depth in range(1, plan.depths + 1):  # head 0 stays zero
        heads = slice(depth * HEAD_DIM, (depth + 1) * HEAD_DIM)
        q, k = qk_vectors(DRAFT_THETA, DRAFT_PAIRS, depth, DRAFT_CONST_PAIR, share)
        sd[p + "self_attn.q_proj.weight"][heads, :VOCAB] = q.float()[:, None]
        sd[p + "self_attn.k_proj.weight"][heads, :VOCAB] = k.float()[:, None]
        for j in range(RING):
            sd[p + "self_attn.v_proj.weight"][depth * HEAD_DIM + j, RING_START + j] = 1.0
            sd[p + "self_attn.o_proj.weight"][:, depth * HEAD_DIM + j] = draft_output_vector(
                RING_START + j, depth, mask_id, plan).float()
    sd[p + "self_attn.q_norm.weight"] = torch.full((HEAD_DIM,), DRAFT_QK_GAIN)
    sd[p + "self_attn.k_norm.weight"] = torch.full((HEAD_DIM,), DRAFT_QK_GAIN)
    return sd


def target_config(template: dict, plan: Plan = DEFAULT) -> dict:
    """The gpurig target config.json with this oracle's shapes."""
    cfg = dict(template)
    cfg.update(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=TARGET_LAYERS,
               num_attention_heads=plan.heads, num_key_value_heads=plan.heads, head_dim=HEAD_DIM, vocab_size=VOCAB,
               layer_types=["full_attention"] * TARGET_LAYERS, tie_word_embeddings=False,
               rope_parameters={"rope_theta": TARGET_THETA, "rope_type": "default"})
    cfg.pop("rope_theta", None)
    return cfg


def draft_config(template: dict, plan: Plan = DEFAULT) -> dict:
    """The gpurig DFlash draft config.json with this oracle's shapes (block 8 by default, capture layers 1, 2)."""
    cfg = target_config(template, plan)
    cfg.update(num_hidden_layers=DRAFT_LAYERS, layer_types=["full_attention"] * DRAFT_LAYERS,
               architectures=["DFlashDraftModel"], block_size=plan.block, num_target_layers=TARGET_LAYERS,
               rope_parameters={"rope_theta": DRAFT_THETA, "rope_type": "default"})
    dflash = dict(template.get("dflash_config") or {})
    dflash.update(block_size=plan.block, target_layer_ids=CAPTURE_LAYERS)
    if "mask_token_id" not in dflash:
        raise ValueError("the draft config template has no dflash_config.mask_token_id")
    cfg["dflash_config"] = dflash
    return cfg
