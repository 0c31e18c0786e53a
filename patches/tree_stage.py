"""The round's tree stage, draft features -> draft head -> top-K / LSE -> tree -> tree padded to the
verify width, optionally replayed from one CUDA graph per batch size.

Eager, the stage launches each of its kernels (the head GEMM, the streaming top-K's two kernels, the
tree build's, one pad per padded field); on a small target at batch 1 their host cost
is a visible part of the round (issue 11: 711 us eager against 37 us as one graph replay for the
DDTree stages on the gpurig's tiny model). Every kernel of the stage has fixed shapes per batch
size and no host synchronisation (`tests/test_kernels_graph.py` captures them on the GPU).

On by default since the GPU matrix passed with it (H200, SGLang 0.5.15, 2026-12-03: greedy ==
plain at budgets 1-64, CUDA graphs on and off, off-chain acceptance == analytic);
`DDTREE_GRAPH_TREE_STAGE=0` launches the stage kernel by kernel. Graphs are used only on CUDA, with
an unsharded lm_head (a sharded head merges its top-K with a collective), and each batch size is
captured the first time it is seen.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, NamedTuple, Optional

import torch

from .kernels import DraftTree
from .kernels.tree_build import root_only_tree
from .tp_draft import build_draft_tree, lm_head_shards
from .tree_round import draft_vocab_logits
from .tree_verify import pad_tree

ENV = "DDTREE_GRAPH_TREE_STAGE"
logger = logging.getLogger(__name__)


class StageOut(NamedTuple):
    tree: DraftTree  # budget + 1 nodes: what the accept walk follows
    padded: DraftTree  # widened to the verify width: what the verify input is built from


class CudaGraph:
    """torch's CUDA graph behind the two calls the stage needs (tests pass a stand-in)."""

    def __init__(self, pool: Any) -> None:
        self.graph, self.pool = torch.cuda.CUDAGraph(), pool

    def capture(self, fn: Callable[[torch.Tensor], StageOut], static: torch.Tensor) -> StageOut:
        with torch.cuda.graph(self.graph, pool=self.pool):
            return fn(static)

    def replay(self) -> None:
        self.graph.replay()


class _Entry(NamedTuple):
    graph: Any
    features: torch.Tensor  # the static input the graph reads
    out: StageOut  # the graph's own output buffers


class TreeStage:
    """`stage(features)` -> StageOut; `stage.from_logits(logits)` is the same stage after the head.

    Graph outputs are the graph's buffers, overwritten by the next replay of that batch size: the
    round reads them before the next round's replay, and the stream orders the two.
    """

    def __init__(self, lm_head: Any, budget: int, topk: Optional[int], width: int, graphs: bool,
                 graph_factory: Optional[Callable[[], Any]] = None) -> None:
        self.lm_head, self.budget, self.topk, self.width = lm_head, budget, topk, width
        self.graphed = bool(graphs) and lm_head_shards(lm_head) == 1
        self._factory = graph_factory
        self._entries: dict[tuple, Optional[_Entry]] = {}  # None: that shape runs eagerly (its capture failed)

    @staticmethod
    def wanted(default: bool = True) -> bool:
        """Graphs unless the server's environment sets DDTREE_GRAPH_TREE_STAGE=0 (or, where the
        adapter's default is eager, unless it sets it to anything else)."""
        return os.environ.get(ENV, "1" if default else "0").strip() != "0"

    def from_logits(self, logits: torch.Tensor) -> StageOut:
        return self._padded(build_draft_tree(logits, self.lm_head, self.budget, self.topk))  # same on every TP rank

    def _padded(self, tree: DraftTree) -> StageOut:
        return StageOut(tree, pad_tree(tree, self.width))

    def _run(self, features: torch.Tensor) -> StageOut:
        if self.budget == 0:  # a root-only tree reads no logits: no head GEMM
            return self._padded(root_only_tree(features.shape[0], features.device))
        return self.from_logits(draft_vocab_logits(features, self.lm_head))

    def __call__(self, features: torch.Tensor) -> StageOut:
        # CUDA features, or any features when a stand-in graph was given (the CPU tests)
        if not (self.graphed and (features.is_cuda or self._factory is not None)):
            return self._run(features)
        key = (tuple(features.shape), features.dtype)
        if key not in self._entries:
            self._entries[key] = self._capture_or_none(features)
        entry = self._entries[key]
        if entry is None:
            return self._run(features)
        entry.features.copy_(features)
        entry.graph.replay()
        return entry.out

    def _capture_or_none(self, features: torch.Tensor) -> Optional[_Entry]:
        """The shape's graph, or None when capturing it failed (e.g. out of GPU memory for one more
        graph): that shape then runs eagerly, as with DDTREE_GRAPH_TREE_STAGE=0, and the server goes on."""
        try:
            return self._capture(features)
        except RuntimeError as exc:  # torch.OutOfMemoryError and CUDA capture errors are RuntimeErrors
            logger.warning("DDTREE: capturing the tree stage for features %s failed (%s: %s); that batch size "
                           "runs the stage eagerly (DDTREE_GRAPH_TREE_STAGE=0 turns the graphs off).",
                           tuple(features.shape), type(exc).__name__, str(exc)[:200])
            return None

    def _capture(self, features: torch.Tensor) -> _Entry:
        static = features.contiguous().clone()
        self._run(static)  # compiles the Triton kernels outside the capture
        if self._factory is None:
            torch.cuda.synchronize(static.device)
            pool = torch.cuda.graph_pool_handle()
            self._factory = lambda: CudaGraph(pool)
        graph = self._factory()
        return _Entry(graph, static, graph.capture(self._run, static))
