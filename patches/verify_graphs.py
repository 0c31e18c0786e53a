"""Target-verify CUDA graphs at every width `--speculative-ddtree-budget auto` may verify.

SGLang captures the target's verify graphs at one width, `speculative_num_draft_tokens` (for `auto`,
the widest budget's). A graph replays only at its width, so with one width every `auto` round would
verify the widest tree. After the target's own capture, the DDTree worker captures one more graph
runner per narrower width of its ladder, each with its own attention backend sized for that width,
the way SGLang's adaptive EAGLE worker (0.5.14+) builds a runner per step count: the runner takes
`attn_backend=` and `speculative_num_draft_tokens=`; while it is built the config says that width
(the server args before 0.5.17, the published config from then), since the backend and the capture's
dummy verify input read it there. Each round swaps the target's backend and graph runner to its width's for the verify
only (`WidthGraphs.use`).

Memory: widths are captured narrowest first until the graph memory they took reaches
`DDTREE_AUTO_GRAPH_MEM_GB` (default 4); the widths left out are trimmed from the ladder, with that
reason, in the start-up line. The KV pool was sized before any of this, so the cap is what the extra
graphs may take from the memory SGLang leaves outside its static fraction.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, NamedTuple, Optional

import torch

from .budget_ladder import MEM_CAP_ENV

logger = logging.getLogger(__name__)

WIDTH_SOURCE = "ddtree: verify width"


def published_draft_tokens() -> Optional[int]:
    """The width in the published config bags (0.5.17+); None where the release has none."""
    try:
        from sglang.srt.runtime_context import get_spec
    except ImportError:
        return None
    try:
        return get_spec().speculative_num_draft_tokens
    except (ValueError, AttributeError):  # not published (yet), or no such leaf
        return None


@contextmanager
def published_width(width: int, source: str = WIDTH_SOURCE) -> Iterator[None]:
    """Publish `width` as `speculative_num_draft_tokens` (0.5.17+) while the block runs."""
    current = published_draft_tokens()
    if current is None or current == width:
        yield
        return
    from sglang.srt.runtime_context import get_context

    get_context().override(source, speculative_num_draft_tokens=width)
    try:
        yield
    finally:
        get_context().override(source, speculative_num_draft_tokens=current)


@contextmanager
def server_width(server_args: Any, width: int) -> Iterator[None]:
    """The config says `width` while the block runs: the published config where the release has one
    (0.5.17+; from 0.5.21 the resolved server args are read-only and say to override it there), else
    the server args, which the backend and the capture read before 0.5.17."""
    if published_draft_tokens() is not None:
        with published_width(width):
            yield
        return
    current = server_args.speculative_num_draft_tokens
    server_args.speculative_num_draft_tokens = width
    try:
        yield
    finally:
        server_args.speculative_num_draft_tokens = current


class WidthRunner(NamedTuple):
    attn_backend: Any
    graph_runner: Any


def runner_takes_width(runner_cls: type) -> bool:
    """Can this release's graph runner be built for another width (0.5.14+: the keywords exist)?"""
    params = inspect.signature(runner_cls.__init__).parameters
    return "attn_backend" in params and "speculative_num_draft_tokens" in params


def _free_bytes(device: Any) -> int:
    return torch.cuda.mem_get_info(device)[0] if torch.device(device).type == "cuda" else 0


class WidthGraphs:
    """The target's verify backend and graph runner per width; the target's own one is `widest`."""

    def __init__(self, model_runner: Any, widest: int) -> None:
        self.model_runner = model_runner
        self.widest = widest
        self.runners: dict[int, WidthRunner] = {}
        self.trimmed: list[tuple[int, str]] = []
        self.used_bytes = 0

    @property
    def widths(self) -> set[int]:
        """Every width a round can replay a graph at."""
        return {self.widest, *self.runners}

    def capture(self, widths: Iterable[int], server_args: Any, cap_bytes: int) -> None:
        """Capture a runner per width (narrowest first) until their memory reaches `cap_bytes`."""
        runner = self.model_runner
        todo = sorted(w for w in set(widths) if w != self.widest)
        runner_cls = type(runner.decode_cuda_graph_runner)
        if todo and not runner_takes_width(runner_cls):
            self.trimmed += [(w, "this SGLang's graph runner captures one width only") for w in todo]
            return
        for i, width in enumerate(todo):
            if self.used_bytes >= cap_bytes:
                self.trimmed += [(w, f"graph memory cap {MEM_CAP_ENV}={cap_bytes / 2**30:g} reached")
                                 for w in todo[i:]]
                return
            before = _free_bytes(runner.device)
            try:
                self.runners[width] = self._build(runner_cls, server_args, width)
            except Exception as error:  # noqa: BLE001 - a width the runner cannot capture is not chosen, with why
                logger.warning("DDTREE auto: no target verify graph at width %d: %r", width, error)
                self.trimmed.append((width, f"its capture failed: {type(error).__name__}"))
            self.used_bytes += max(0, before - _free_bytes(runner.device))

    def _build(self, runner_cls: type, server_args: Any, width: int) -> WidthRunner:
        runner = self.model_runner
        with server_width(server_args, width):
            workspace = getattr(runner, "init_new_workspace", None)
            try:  # a backend of its own, as SGLang's adaptive EAGLE builds one per step count
                attn_backend = runner._get_attention_backend(init_new_workspace=True)
            finally:
                runner.init_new_workspace = workspace
            with self._swapped(WidthRunner(attn_backend, runner.decode_cuda_graph_runner)):
                graph_runner = runner_cls(runner, attn_backend=attn_backend, speculative_num_draft_tokens=width)
        return WidthRunner(attn_backend, graph_runner)

    @contextmanager
    def use(self, width: int) -> Iterator[Any]:
        """The target verifies with `width`'s backend and graphs while the block runs; yields the backend."""
        chosen = self.runners.get(width)
        if chosen is None:
            yield self.model_runner.attn_backend
            return
        with self._swapped(chosen):
            yield chosen.attn_backend

    @contextmanager
    def _swapped(self, chosen: WidthRunner) -> Iterator[None]:
        runner = self.model_runner
        saved = runner.attn_backend, runner.decode_cuda_graph_runner
        runner.attn_backend, runner.decode_cuda_graph_runner = chosen
        try:
            yield
        finally:
            runner.attn_backend, runner.decode_cuda_graph_runner = saved
