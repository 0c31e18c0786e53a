"""`--speculative-ddtree-budget auto`: the ladder of tree budgets and the per-round choice among them.

Pure Python (no torch, no SGLang), so the server-args validation and the unit tests import it alone.

Why a choice per round: a fixed budget is right for one batch size; a wider tree accepts more tokens
per round but its verify costs more, and how much more grows with the batch. Each round therefore
verifies the budget that maximises expected tokens per second for its batch:
- expected tokens of budget b: `1 + c_b * S_b`, where `S_b` is the sum of the path probabilities of the
  first b nodes of the best-first tree (under the draft-factorised model the expected accepted length
  of a prefix-closed tree is 1 + the sum of its nodes' path probabilities, and the best-first tree's
  b-node prefix is the best b-node tree, so one tree built at the largest budget gives every b), and
  `c_b` the observed / predicted ratio of accepted draft tokens in rounds that ran b (drafters are
  over- or under-confident; 1 until measured);
- cost of budget b at a batch size: the running median of timed rounds of that (batch bucket, b) on
  this machine, never a model of it. A (bucket, b) with fewer than three timings is tried before any
  choice is made from costs (a median of three outlives one slow first round; a median of two is
  its mean), and every `explore_every` rounds a bucket retries a budget one or two rungs from its
  best, in turn, so that costs that drift (longer prefixes) are re-measured and a rung the ladder
  holds twice at one cost (15 and 16 beside a 16-token block) cannot hide the next one for good.
The chooser only reads statistics of rounds already finished, so a round never waits on the device.

Plain decoding may be a rung too (budget 0, `PLAIN`; DDTREE_AUTO_PLAIN=1): the round skips the
draft pass and the tree, and the target verifies each request's last token alone, which emits
exactly one token (no calibration applies). Where the batch is large and the drafter weak, that
is what maximises tokens per second. The drafter loses nothing: its KV is filled from the target's
features of every committed token after each verify, a plain round's token included, so the next
tree round drafts as usual.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

# Budgets `auto` may verify (tree nodes besides the root), narrowest first.
CANDIDATES = (4, 8, 16, 32, 64, 128, 256)
DEFAULT_MAX_BUDGET = 64  # the widest budget the GPU matrix has verified
MAX_BUDGET_ENV = "DDTREE_AUTO_MAX_BUDGET"
AUTO = "auto"


LOG_EVERY_ENV = "DDTREE_AUTO_LOG_EVERY"  # rounds between chosen-budget lines, then at warning level (GPU matrix)
PLAIN = 0  # the rung that decodes plainly: no draft pass, the target verifies the root alone
PLAIN_ENV = "DDTREE_AUTO_PLAIN"


def is_auto(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == AUTO


def max_budget_setting(environ: Optional[dict] = None) -> int:
    """The widest budget `auto` may use: DDTREE_AUTO_MAX_BUDGET in the server's environment, else 64."""
    raw = (environ if environ is not None else os.environ).get(MAX_BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BUDGET
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{MAX_BUDGET_ENV} must be a positive integer, got {raw!r}.")
    return int(raw)


def plain_setting(environ: Optional[dict] = None) -> bool:
    """Whether `auto` may decode plainly: DDTREE_AUTO_PLAIN=1 in the server's environment. Off by
    default until a GPU run has shown the width-1 verify graph and the plain rounds exact."""
    raw = (environ if environ is not None else os.environ).get(PLAIN_ENV, "").strip().lower()
    if raw in ("1", "on", "true", "yes"):
        return True
    if raw in ("", "0", "off", "false", "no"):
        return False
    raise ValueError(f"{PLAIN_ENV} must be 1 or 0, got {raw!r}.")


def budget_width(budget: int, block: int) -> int:
    """Tokens per request the target verifies for `budget`: the root alone for the plain rung; else
    the tree, padded to the draft block (a fixed budget's width)."""
    return 1 if budget == PLAIN else max(budget + 1, block)


MEM_CAP_ENV = "DDTREE_AUTO_GRAPH_MEM_GB"
DEFAULT_MEM_CAP_GB = 4.0


def mem_cap_bytes(environ: Optional[dict] = None) -> int:
    """The most bytes `auto`'s extra target-verify graphs may take: DDTREE_AUTO_GRAPH_MEM_GB, else 4 GiB."""
    raw = (environ if environ is not None else os.environ).get(MEM_CAP_ENV, "").strip()
    if not raw:
        return int(DEFAULT_MEM_CAP_GB * 2**30)
    try:
        gb = float(raw)
    except ValueError:
        gb = -1.0
    if not gb >= 0 or gb == float("inf"):
        raise ValueError(f"{MEM_CAP_ENV} must be a number of GiB >= 0, got {raw!r}.")
    return int(gb * 2**30)


def prefix_capacity(topk: int, depth: int) -> int:
    """Distinct draft prefixes of length 1..depth over topk ranks (the most nodes a tree can have)."""
    return sum(topk**d for d in range(1, depth + 1))


@dataclass(frozen=True)
class Ladder:
    """The budgets a round may verify, narrowest first, and why each other candidate was left out."""

    budgets: tuple[int, ...]
    trimmed: tuple[tuple[int, str], ...] = ()

    @property
    def widest(self) -> int:
        return self.budgets[-1]

    def restricted(self, keep: Iterable[int], reason: str) -> "Ladder":
        """This ladder with only the budgets in `keep`; the others trimmed for `reason`."""
        kept = set(keep)
        return Ladder(tuple(b for b in self.budgets if b in kept),
                      self.trimmed + tuple((b, reason) for b in self.budgets if b not in kept))

    def describe(self) -> str:
        """One log line: the ladder, then each trimmed budget with its reason."""
        text = "DDTREE auto budget ladder: " + ", ".join(
            "0 (plain decoding)" if b == PLAIN else str(b) for b in self.budgets)
        reasons: dict[str, list[int]] = {}
        for b, why in self.trimmed:
            reasons.setdefault(why, []).append(b)
        if reasons:
            text += "; trimmed: " + "; ".join(
                f"{', '.join(str(b) for b in sorted(budgets))} ({why})" for why, budgets in reasons.items())
        return text


def build_ladder(block: int, topk: Optional[int], max_budget: int, max_allowed: int, plain: bool = False) -> Ladder:
    """The ladder for a drafter of `block` tokens (depth block - 1), as the server args allow it;
    with `plain`, the plain-decoding rung below every tree.

    The verify width of budget b is max(b + 1, block) (as for a fixed budget), so a budget below
    block - 1 costs the block's verify and accepts less: block - 1 stands for all of them.
    `topk` (None = each budget's own) caps the prefixes a tree can hold; `max_budget` is the
    operator's cap (DDTREE_AUTO_MAX_BUDGET), `max_allowed` the tree build's limit. Budget block - 1
    (DFlash's own width; any topk fills it) always stays, so the ladder is never empty.
    """
    depth = block - 1
    floor = max(depth, 1)
    budgets, trimmed = ([PLAIN] if plain else []) + [floor], []
    for b in sorted(set(CANDIDATES) - {floor}):
        if b < floor:
            trimmed.append((b, f"verifies the draft block's width {block} like budget {floor}"))
        elif b > max_allowed:
            trimmed.append((b, f"above the tree build's limit {max_allowed}"))
        elif b > max_budget:
            trimmed.append((b, f"above {MAX_BUDGET_ENV}={max_budget}"))
        elif topk is not None and b > prefix_capacity(topk, depth):
            trimmed.append((b, f"more nodes than topk {topk} gives over {depth} draft positions"))
        else:
            budgets.append(b)
    return Ladder(tuple(budgets), tuple(trimmed))


def batch_bucket(bs: int) -> int:
    """Rounds are timed per power-of-two batch bucket (1, 2, 4, 8, ...)."""
    return 1 << max(bs - 1, 0).bit_length()


@dataclass
class Calibration:
    """Observed / predicted accepted draft tokens per budget, both decayed sums (recent rounds weigh
    most); a budget not yet run borrows the ratio over all budgets, and 1 before any round."""

    decay: float = 0.99
    observed: dict[int, float] = field(default_factory=dict)
    predicted: dict[int, float] = field(default_factory=dict)

    def add(self, budget: int, predicted: float, observed: float) -> None:
        self.predicted[budget] = self.decay * self.predicted.get(budget, 0.0) + predicted
        self.observed[budget] = self.decay * self.observed.get(budget, 0.0) + observed

    def ratio(self, budget: int) -> float:
        predicted = self.predicted.get(budget, 0.0)
        if predicted <= 0:
            total_p, total_o = sum(self.predicted.values()), sum(self.observed.values())
            return total_o / total_p if total_p > 0 else 1.0
        return self.observed[budget] / predicted


class CostTable:
    """Seconds per round by (batch bucket, budget): the median of the last `window` timings."""

    def __init__(self, window: int = 16) -> None:
        self.window = window
        self._times: dict[tuple[int, int], deque] = {}

    def add(self, bs: int, budget: int, seconds: float) -> None:
        self._times.setdefault((batch_bucket(bs), budget), deque(maxlen=self.window)).append(seconds)

    def samples(self, bs: int, budget: int) -> int:
        return len(self._times.get((batch_bucket(bs), budget), ()))

    def median(self, bs: int, budget: int) -> Optional[float]:
        times = self._times.get((batch_bucket(bs), budget))
        return statistics.median(times) if times else None


class WidthChooser:
    """Picks each round's budget from the ladder (module docstring); fed by finished rounds only."""

    def __init__(self, ladder: Ladder, width_of: Callable[[int], int], token_cap: Optional[int] = None,
                 min_samples: int = 3, explore_every: int = 32, gain_decay: float = 0.9, window: int = 16) -> None:
        self.ladder, self.width_of = ladder, width_of  # width_of(budget): that budget's verify width
        self.token_cap = token_cap  # a verify of bs x width tokens above it is not chosen
        self.min_samples, self.explore_every, self.gain_decay = min_samples, explore_every, gain_decay
        self.costs = CostTable(window)
        self.calibration = Calibration()
        self.gains: Optional[list[float]] = None  # running mean of S_b per ladder budget
        self._rounds: dict[int, int] = {}  # rounds chosen per bucket

    def allowed(self, bs: int) -> list[int]:
        """The ladder's budgets whose verify (bs x width tokens) fits the token cap; the narrowest always."""
        fits = [b for b in self.ladder.budgets if self.token_cap is None or bs * self.width_of(b) <= self.token_cap]
        return fits or [self.ladder.budgets[0]]

    def expected_tokens(self, budget: int) -> float:
        if self.gains is None:  # (the plain rung's gain is 0: 1 token)
            return 1.0
        return 1.0 + self.calibration.ratio(budget) * self.gains[self.ladder.budgets.index(budget)]

    def choose(self, bs: int) -> int:
        allowed = self.allowed(bs)
        bucket = batch_bucket(bs)
        count = self._rounds.get(bucket, 0)
        self._rounds[bucket] = count + 1
        untimed = [b for b in allowed if self.costs.samples(bs, b) < self.min_samples]
        if untimed:  # narrowest first; a timing arrives a round or two after its round ran
            return untimed[0]
        best = max(allowed, key=lambda b: (self.expected_tokens(b) / max(self.costs.median(bs, b), 1e-9), -b))
        if self.explore_every and count % self.explore_every == self.explore_every - 1:
            i = allowed.index(best)
            near = [allowed[j] for j in (i - 1, i + 1, i - 2, i + 2) if 0 <= j < len(allowed)]
            if near:
                return near[(count // self.explore_every) % len(near)]
        return best

    def observe_gains(self, gains: Sequence[float]) -> None:
        """A finished round's S_b per ladder budget (mean over its requests)."""
        if self.gains is None:
            self.gains = list(gains)
        else:
            d = self.gain_decay
            self.gains = [d * old + (1 - d) * new for old, new in zip(self.gains, gains)]

    def observe_round(self, bs: int, budget: int, predicted: float, accepted: float,
                      seconds: Optional[float]) -> None:
        """A finished round: its predicted and accepted draft tokens per request, and its time."""
        if budget != PLAIN:  # a plain round drafts nothing: nothing to calibrate
            self.calibration.add(budget, predicted, accepted)
        if seconds is not None:
            self.costs.add(bs, budget, seconds)

