"""The runtime side of `--speculative-ddtree-budget auto` (the choice itself: budget_ladder.py).

Each round the worker builds the tree at the ladder's widest budget (best-first: its b-node prefix is
the best b-node tree), asks `AutoBudget.choose` for the round's budget, verifies that prefix
(`prefix_tree`, padded to `width(b) = max(b + 1, block)`, as a fixed budget b would be verified), and
hands the round to `AutoBudget.finish`, which queues on the device what the chooser learns from it:
the tree's predicted gain of every ladder budget, the accepted draft tokens, and the round's time.
A plain round (budget 0: no draft, no tree, width 1) hands over no tree: only its time is learnt.
Those come back to the host asynchronously (a non-blocking copy into pinned memory and a CUDA event;
timed by event pairs) and are read only once their event has completed, so no round waits on the
device; the chooser works from rounds already finished.

CUDA graphs: the target captures its verify graphs at one width (`speculative_num_draft_tokens`, the
widest budget's); the worker then captures one per narrower ladder width (verify_graphs.py), and while
graphs are on `auto` verifies only budgets whose width has a graph (the start-up line names the others
and why). With `--disable-cuda-graph` every ladder budget is eligible.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Collection, Iterator, NamedTuple, Optional, Sequence

import torch

from .budget_ladder import (
    LOG_EVERY_ENV, PLAIN, Ladder, WidthChooser, batch_bucket, budget_width, build_ladder, is_auto,
    max_budget_setting, plain_setting,
)
from .kernels import DraftTree
from .server_args import MAX_BUDGET

logger = logging.getLogger(__name__)
LOG_EVERY = 200  # rounds between two info lines of the budgets chosen
IN_FLIGHT = 8  # rounds whose statistics may be on their way back at once (more are not collected)


def auto_ladder(budget_setting: Any, block: int, topk: int) -> Optional[Ladder]:
    """The ladder of an `auto` budget (as server_args.py sized the widths for), else None."""
    if not is_auto(budget_setting):
        return None
    return build_ladder(block, topk, max_budget_setting(), MAX_BUDGET, plain=plain_setting())


def prefix_tree(tree: DraftTree, n: int) -> DraftTree:
    """The first `n` nodes of a best-first tree: the best tree of n - 1 nodes besides the root.

    Nodes are in pop order (parent < child, siblings in rank order), so the prefix is prefix-closed
    and only links to nodes past the cut need dropping: a child or next sibling at index >= n.
    """
    if n >= tree.tokens.shape[1]:
        return tree

    def cut(links: torch.Tensor) -> torch.Tensor:
        links = links[:, :n]
        return torch.where(links >= n, torch.full_like(links, -1), links)

    return DraftTree(tokens=tree.tokens[:, :n], depth=tree.depth[:, :n], parent=tree.parent[:, :n],
                     first_child=cut(tree.first_child), next_sibling=cut(tree.next_sibling),
                     logprob=tree.logprob[:, :n])


def ladder_gains(logprob: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Mean over requests of S_b, the sum of the path probabilities of the first b nodes, for each
    budget b (`columns` holds b - 1 per budget)."""
    probs = logprob[:, 1:].float().exp().cumsum(dim=1)  # [bs, widest]
    return probs.index_select(1, columns).mean(dim=0)


@contextmanager
def verify_width(attn_backend: Any, width: int) -> Iterator[None]:
    """The target's attention backend verifies `width` tokens per request while the block runs.

    SGLang's Triton backend sizes its eager target-verify metadata from its `num_draft_tokens` (the
    server's verify width) on 0.5.14-0.5.16, from it or the verify input's width on 0.5.17-0.5.20, and
    from the input's width on 0.5.21+ (read in each release's source); FlashInfer reads the input's.
    Only differs from the server's width without CUDA graphs (with them every round verifies that).
    """
    current = getattr(attn_backend, "num_draft_tokens", None)
    if not isinstance(current, int) or current == width:
        yield
        return
    attn_backend.num_draft_tokens = width
    try:
        yield
    finally:
        attn_backend.num_draft_tokens = current


class Clock:
    """Times a round without waiting for it: CUDA event pairs read once complete; host time on a CPU."""

    def __init__(self, device: Any) -> None:
        self.cuda = torch.device(device).type == "cuda"

    def start(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started: Any) -> Callable[[], Optional[float]]:
        """A poll: the round's seconds once known, else None."""
        if not self.cuda:
            seconds = time.perf_counter() - started
            return lambda: seconds
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return lambda: started.elapsed_time(end) / 1000.0 if end.query() else None


class _Pending(NamedTuple):
    bs: int
    budget: int
    stats: Optional[torch.Tensor]  # host: [S_b per tree budget..., accepted draft tokens per request]; None: plain
    copied: Any  # a CUDA event, or None where the copy was synchronous
    seconds: Callable[[], Optional[float]]


class AutoBudget:
    """Per-round budget for `auto`: the chooser, the tree's prefix, the statistics' way back."""

    def __init__(self, ladder: Ladder, block: int, device: Any, token_cap: Optional[int] = None) -> None:
        self.ladder, self.block, self.device = ladder, block, device
        self.chooser = WidthChooser(ladder, self.width, token_cap)
        self.clock = Clock(device)
        self.cuda = torch.device(device).type == "cuda"
        self._columns = torch.tensor([b - 1 for b in ladder.budgets if b != PLAIN], device=device)
        self._plain = PLAIN in ladder.budgets  # its gain is 0: the chooser's gains lead with it
        self._pending: deque[_Pending] = deque()
        self._learning = len(ladder.budgets) > 1  # one budget (CUDA graphs on): nothing to time or collect
        self._started: Any = None
        self._chosen: dict[int, list[int]] = {}  # batch bucket -> budgets chosen since the last log line
        self._rounds = 0
        asked = os.environ.get(LOG_EVERY_ENV, "").strip()
        self._log_every = int(asked) if asked.isdigit() and int(asked) > 0 else LOG_EVERY
        self._log_level = logging.WARNING if asked else logging.INFO

    @classmethod
    def for_worker(cls, ladder: Ladder, block: int, device: Any, graph_widths: Optional[Collection[int]],
                   token_cap: Optional[int], trimmed: Sequence[tuple[int, str]] = ()) -> "AutoBudget":
        """The worker's, logged once: with CUDA graphs on (`graph_widths`: the verify widths captured),
        only the budgets verified at a captured width (`trimmed`: why each other width has no graph);
        without, those whose verify at batch 1 fits `token_cap` (--chunked-prefill-size: the most
        tokens SGLang sizes one forward's activations for; the narrowest budget always stays)."""
        token_cap = token_cap if token_cap is not None and token_cap > 0 else None
        if graph_widths is not None:
            why = dict(trimmed)
            for width in sorted({budget_width(b, block) for b in ladder.budgets} - set(graph_widths)):
                ladder = ladder.restricted(
                    [b for b in ladder.budgets if budget_width(b, block) != width],
                    f"no target verify graph at its width ({why.get(width, 'not captured')}; "
                    "with --disable-cuda-graph auto chooses every width)",
                )
        elif token_cap is not None:
            fits = [b for b in ladder.budgets if budget_width(b, block) <= token_cap] or [ladder.budgets[0]]
            ladder = ladder.restricted(fits, f"its verify exceeds --chunked-prefill-size {token_cap} tokens")
        auto = cls(ladder, block, device, token_cap)
        logger.warning("%s (verify tokens per round capped at %s)", ladder.describe(), token_cap)  # once
        return auto

    def width(self, budget: int) -> int:
        return budget_width(budget, self.block)

    def choose(self, bs: int) -> int:
        """The round's budget, from the rounds already finished; starts the round's clock."""
        if not self._learning:
            return self.ladder.widest
        self._collect()
        budget = self.chooser.choose(bs)
        self._started = self.clock.start()
        return budget

    def finish(self, bs: int, budget: int, tree: Optional[DraftTree], accept_len: torch.Tensor) -> None:
        """Queue what the chooser learns from this round (`tree`: the widest tree the round built;
        None for a plain round, which drafted nothing)."""
        self._note(bs, budget)
        if not self._learning or len(self._pending) >= IN_FLIGHT:
            return
        seconds = self.clock.stop(self._started)
        if tree is None:
            self._pending.append(_Pending(bs, budget, None, None, seconds))
            return
        stats = torch.cat([ladder_gains(tree.logprob, self._columns), accept_len.float().mean()[None]])
        if self.cuda:
            host = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=True)
            host.copy_(stats, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        else:
            host, copied = stats.clone(), None
        self._pending.append(_Pending(bs, budget, host, copied, seconds))

    def _collect(self) -> None:
        while self._pending:
            head = self._pending[0]
            if head.copied is not None and not head.copied.query():
                return
            seconds = head.seconds()
            if seconds is None:
                return
            self._pending.popleft()
            if head.stats is None:  # a plain round
                self.chooser.observe_round(head.bs, PLAIN, 0.0, 0.0, seconds)
                continue
            values = head.stats.tolist()
            gains, accepted = [0.0] * self._plain + values[:-1], values[-1]
            self.chooser.observe_gains(gains)
            predicted = gains[self.ladder.budgets.index(head.budget)]
            self.chooser.observe_round(head.bs, head.budget, predicted, accepted, seconds)

    def _note(self, bs: int, budget: int) -> None:
        self._chosen.setdefault(batch_bucket(bs), []).append(budget)
        self._rounds += 1
        if self._rounds % self._log_every:
            return
        calibration = self.chooser.calibration
        parts = [f"batch<={bucket}: mean budget {sum(c) / len(c):.1f} over {len(c)} rounds"
                 for bucket, c in sorted(self._chosen.items())]
        ratios = ", ".join(f"{b}: {calibration.ratio(b):.2f}"
                           for b in self.ladder.budgets if b in calibration.predicted)
        logger.log(self._log_level, "DDTREE auto budget: %s; observed/predicted acceptance %s", "; ".join(parts),
                   ratios or "n/a")
        self._chosen.clear()
