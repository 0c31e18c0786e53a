"""`table_fence`: where a release lets the worker fence the overlap scheduler behind a round that
rewrote `req_to_token`, and what the fence does (stand-in device events). That the release's own
barrier and result processor then wait on it is shown per release by the scheduler-path harness
(tests/test_scheduler_path.py) and the v2 pool harness (tests/test_ddtree_round_v2_pool.py)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tf(dropin):
    return dropin("table_fence")


class Newer:
    @property
    def last_shared_read_runner(self):
        return self.runner


class Older:
    @property
    def war_fastpath_runner(self):
        return self.runner


class Neither:
    war_fastpath_runner = None  # not a property: not the barrier's slot


@pytest.mark.parametrize("cls, slot", [
    (Newer, ("last_shared_read_runner", "shared_read_done_event")),
    (Older, ("war_fastpath_runner", "war_fastpath_read_done_event")),
    (Neither, None),
])
def test_barrier_slot(tf, cls, slot):
    assert tf.barrier_slot(cls) == slot


@pytest.mark.parametrize("slot, skips, hook, reason", [
    (("p", "e"), False, True, None),
    (("p", "e"), True, True, "this release's scheduler skips its WAR barrier for DFlash"),
    (None, False, True, "this release's scheduler has no WAR barrier event to extend"),
    (("p", "e"), False, False, "this release's result processor does not call prepare_for_kv_cache_release"),
])
def test_unfenced(tf, slot, skips, hook, reason):
    assert tf.unfenced(slot, skips, hook) == reason


def test_release_hook_is_read_from_the_processor_s_source(tf, tmp_path, monkeypatch):
    (tmp_path / "calls_hook.py").write_text("x = getattr(w, 'prepare_for_kv_cache_release', None)\n")
    (tmp_path / "no_hook.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tf.release_hook_called("calls_hook")
    assert not tf.release_hook_called("no_hook")
    assert not tf.release_hook_called("no_such_package.processor")


class Device:
    """Stand-in device module: events note their record order; the stream notes what it waited on."""

    def __init__(self):
        self.recorded, self.waited = [], []
        device = self

        class Event:
            def record(self, stream=None):
                device.recorded.append(self)

        self.Event = Event
        self.stream = types.SimpleNamespace(wait_event=self.waited.append)

    def current_stream(self):
        return self.stream


@pytest.fixture
def device(monkeypatch):
    dev = Device()
    monkeypatch.setattr(torch, "get_device_module", lambda device=None: dev)
    return dev


def test_a_published_read_done_event_is_replaced_by_the_round_s_end(tf, device):
    worker = Newer()
    worker.runner = types.SimpleNamespace(shared_read_done_event="verify read done")
    fence = tf.TableFence(tf.barrier_slot(Newer), "cuda")
    fence.before_release()
    assert device.waited == []  # no rewrite yet: nothing to wait for
    fence.after_write(worker)
    assert worker.runner.shared_read_done_event is fence.event is device.recorded[-1]
    fence.before_release()
    assert device.waited == [fence.event]


def test_an_unpublished_barrier_stays_coarse(tf, device):
    """None makes SGLang's barrier wait for the whole forward stream: stronger than our event."""
    worker = Older()
    worker.runner = types.SimpleNamespace(war_fastpath_read_done_event=None)
    fence = tf.TableFence(tf.barrier_slot(Older), "cuda")
    fence.after_write(worker)
    assert worker.runner.war_fastpath_read_done_event is None
    fence.before_release()
    assert device.waited == [device.recorded[-1]]
