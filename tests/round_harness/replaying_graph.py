"""A CPU stand-in for a CUDA graph, for `tree_stage.TreeStage(graph_factory=...)`.

Capture runs the function once on the static input and keeps its outputs; replay runs it again on
the same static input and writes the results into those kept outputs, which is what a CUDA graph
replay does to its buffers. So a caller that forgot to copy new inputs into the static buffer, or
that read a tensor the replay does not own, gets stale or wrong results here too.
"""

from __future__ import annotations

import torch


def _leaves(x) -> list[torch.Tensor]:
    return [x] if isinstance(x, torch.Tensor) else [t for part in x for t in _leaves(part)]


class ReplayingGraph:
    captures = 0
    replays = 0

    def capture(self, fn, static):
        type(self).captures += 1
        self.fn, self.static = fn, static
        self.out = fn(static)
        return self.out

    def replay(self) -> None:
        type(self).replays += 1
        for kept, new in zip(_leaves(self.out), _leaves(self.fn(self.static)), strict=True):
            kept.copy_(new)
