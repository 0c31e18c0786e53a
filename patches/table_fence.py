"""Fence the scheduler's use of `req_to_token` behind a round that rewrote it (the reorder commit
under SGLang's overlap scheduler).

Under overlap the scheduler launches round N+1 on the forward stream, then processes round N's
results on its schedule stream: it releases each finished request's KV by reading the request's
`req_to_token` row and may hand the row to a new request, while round N+1, which still carries the
finished request, runs. SGLang orders the scheduler's writes after the forward's *reads* only (its
WAR barrier waits on a read-done event the verify publishes), which is enough while a round only
reads the table. A round that rewrites rows (`kv_commit`, reorder) needs two more fences:
- after the rewrite: an event recorded right after it replaces the published read-done event, so
  the barrier waits for the rewrite too (where nothing was published, the barrier already waits for
  the whole forward stream); what the round does after the rewrite (the draft-KV write) neither
  reads nor writes what the scheduler touches, as after SGLang's own read-done event;
- before a finished request's release: the result processor calls the worker's
  `prepare_for_kv_cache_release(req)`, and the schedule stream waits there for that event (on
  0.5.15-0.5.16 the barrier stands before the launch, so nothing else orders the release's reads
  after the round; later, waiting twice costs nothing).
A release without the barrier's event slot or the release hook gets no fence, nor does 0.5.14,
whose scheduler skips the barrier for DFlash (a retracted request's release is then unordered):
there the reorder stays blocked under overlap (`unfenced`, `kv_commit.reorder_blocker`).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

# (the spec worker's property naming the runner that owns the read-done event, the event's attribute)
BARRIER_SLOTS = (
    ("last_shared_read_runner", "shared_read_done_event"),  # 0.5.20+
    ("war_fastpath_runner", "war_fastpath_read_done_event"),  # 0.5.14-0.5.19
)
RELEASE_HOOK = "prepare_for_kv_cache_release"
RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor"


def barrier_slot(worker_cls: type) -> tuple[str, str] | None:
    """Where `worker_cls`'s scheduler reads the WAR barrier's event, or None."""
    for runner_property, event_attr in BARRIER_SLOTS:
        if isinstance(getattr(worker_cls, runner_property, None), property):
            return runner_property, event_attr
    return None


def release_hook_called(module: str = RESULT_PROCESSOR) -> bool:
    """Does the result processor call the worker's release hook? Read from its source (a rename
    must leave the reorder blocked, not unfenced)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    if spec is None or not spec.origin:
        return False
    with open(spec.origin, encoding="utf-8") as f:
        return RELEASE_HOOK in f.read()


def unfenced(slot: tuple[str, str] | None, barrier_skips_dflash: bool, hook_called: bool) -> str | None:
    """Why a rewritten table cannot be fenced on this release (module docstring), or None."""
    if barrier_skips_dflash:
        return "this release's scheduler skips its WAR barrier for DFlash"
    if slot is None:
        return "this release's scheduler has no WAR barrier event to extend"
    if not hook_called:
        return f"this release's result processor does not call {RELEASE_HOOK}"
    return None


class TableFence:
    """One worker's fence: `after_write` right after a round's table rewrite, `before_release` from
    the worker's release hook."""

    def __init__(self, slot: tuple[str, str], device: Any):
        self.runner_property, self.event_attr = slot
        self.device = device
        self.event = None  # the last round's table rewrite, done

    def after_write(self, worker: Any) -> None:
        event = torch.get_device_module(self.device).Event()
        event.record()
        self.event = event
        runner = getattr(worker, self.runner_property)
        if getattr(runner, self.event_attr, None) is not None:  # else the barrier waits for the whole stream
            setattr(runner, self.event_attr, event)

    def before_release(self) -> None:
        if self.event is not None:
            torch.get_device_module(self.device).current_stream().wait_event(self.event)
