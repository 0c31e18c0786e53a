"""Timed engines that take the GPU in turns, run by run (gpu_matrix's round-time rows).

Engines timed one after another drift apart by a millisecond a round between calls on the tiny
model (docs/evidence/logs/gpu-check-0.5.13-graph-stage-2026-12-05.txt), so a ratio of two such medians says
little. Interleaved, every engine's k-th run sits between the others' k-th runs: each engine
process holds a `Turns` over one shared folder, all of them wait until every engine is warm
(`ready`), then run k of engine i starts when the shared counter reads `k * count + i` (`take`) and
hands it on when done (`give`); `finish` waits for the last run, so no engine shuts down beside
another's timed run. Only the counter's owner writes it (atomically, through a rename).

A peer that never arrives or dies leaves the others waiting `timeout_s` at most: from then on
they run without waiting and no longer move the counter (so the rest time out too, none runs out
of turn believing it is in turn), and `interleaved` says so (False): such runs may have overlapped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


class Turns:
    def __init__(self, folder: str | Path, index: int, count: int, timeout_s: float = 120.0,
                 poll_s: float = 0.002) -> None:
        if not 0 <= index < count:
            raise ValueError(f"turn index {index} outside 0..{count - 1}")
        self.folder, self.index, self.count = Path(folder), index, count
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.interleaved = True
        self.folder.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_config(cls, spec: dict | None) -> "Turns | None":
        """`{"dir": ..., "index": i, "count": n}` from an engine's bench config, or None (no turns)."""
        return cls(spec["dir"], spec["index"], spec["count"], spec.get("timeout_s", 120.0)) if spec else None

    def ready(self) -> None:
        (self.folder / f"ready-{self.index}").touch()
        self._wait(lambda: all((self.folder / f"ready-{i}").exists() for i in range(self.count)))

    def take(self, run: int) -> None:
        self._wait(lambda: self._counter() >= run * self.count + self.index)

    def give(self, run: int) -> None:
        if not self.interleaved:  # not this engine's turn to hand on: the counter never jumps
            return
        tmp = self.folder / f"turn.{self.index}.tmp"
        tmp.write_text(str(run * self.count + self.index + 1))
        os.replace(tmp, self.folder / "turn")

    def finish(self, runs: int) -> None:
        self._wait(lambda: self._counter() >= runs * self.count)

    def _counter(self) -> int:
        try:
            return int((self.folder / "turn").read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def _wait(self, done) -> None:
        if not self.interleaved:
            return
        end = time.monotonic() + self.timeout_s
        while not done():
            if time.monotonic() > end:
                self.interleaved = False  # a peer is gone: go on alone
                return
            time.sleep(self.poll_s)
