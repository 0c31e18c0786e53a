"""Capabilities decide the gates: the policy's gate decisions follow the runtime's declared table,
requests for absent features are refused one by one, and a native DDTREE is left alone."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ddtree_patch.audit import audit
from ddtree_patch.data.policy import ENTRIES
from ddtree_patch.dropins import capabilities
from ddtree_patch.locate import from_folder
from ddtree_patch.sites import Decision
from patches.capabilities import CAPABILITIES
from patches.requests import validate_ddtree_request
from patches.server_args import DDTreeArgumentError, check_absent_features

DDTREE = SimpleNamespace(is_ddtree=lambda: True)
DFLASH = SimpleNamespace(is_ddtree=lambda: False)


def _request(**fields):
    params = dict(json_schema=None, regex=None, ebnf=None, structural_tag=None)
    params.update(fields.pop("params", {}))
    return SimpleNamespace(sampling_params=SimpleNamespace(**params), **fields)


def test_policy_loads_the_dropped_in_table():
    assert capabilities().CAPABILITIES.keys() == CAPABILITIES.keys()


def test_every_gate_decision_follows_its_capability():
    for entry in ENTRIES:
        if not entry.capability:
            continue
        cap = CAPABILITIES[entry.capability]
        if entry.decision in (Decision.KEEP, Decision.NARROW):
            assert not cap.admitted, entry
            assert cap.refusal, f"{cap.name} is absent but has no refusal message"
        else:
            assert entry.decision is Decision.WIDEN, entry
            assert cap.admitted or "refuses it here" in entry.reason, entry


@pytest.mark.parametrize("fields,capability", [
    (dict(return_logprob=True), "logprobs"),
    (dict(return_hidden_states=True), "hidden-states-return"),
    (dict(return_sampling_mask=True), "sampling-mask"),
    (dict(custom_logit_processor="{\"callable\": \"...\"}"), "custom-logit-processor"),
])
def test_ddtree_refuses_each_absent_request_feature(fields, capability):
    req = _request(**fields)
    assert validate_ddtree_request(DDTREE, req) == CAPABILITIES[capability].refusal
    assert validate_ddtree_request(DFLASH, req) is None  # DFlash's own check decides for DFLASH


@pytest.mark.parametrize("capability,fields", [
    ("logprobs", dict(return_logprob=True)),  # SGLang's speculative log-prob helper (0.5.18+)
    ("grammar", dict(params=dict(regex="a+"))),  # SGLang's tree grammar walk for DFlash workers (0.5.17+)
])
def test_a_capability_needing_a_release_helper_is_served_only_where_the_release_has_it(monkeypatch, capability,
                                                                                        fields):
    """Refused without the release helper its implementation calls, served with it."""
    import sys
    import types

    from patches import requests

    module, _, name = CAPABILITIES[capability].needs.partition(":")
    req = _request(**fields)
    requests._provides.cache_clear()
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))  # a release without the helper
    assert validate_ddtree_request(DDTREE, req) == CAPABILITIES[capability].refusal
    requests._provides.cache_clear()
    monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(**{name: print}))
    assert validate_ddtree_request(DDTREE, req) is None
    requests._provides.cache_clear()


def test_a_plain_request_is_served():
    assert validate_ddtree_request(DDTREE, _request(return_logprob=False)) is None
    assert validate_ddtree_request(DDTREE, SimpleNamespace()) is None  # an older Req without the fields


@pytest.mark.parametrize("flags,capability", [
    (dict(enable_unified_memory=True), "unified-memory"),
    (dict(enable_lora=True), "lora"),
    (dict(lora_paths=["a"]), "lora"),
    (dict(disaggregation_mode="decode"), "pd-disaggregation"),
    (dict(enable_mixed_chunk=True), "mixed-chunk"),
    (dict(enable_hisparse=True), "hisparse"),
])
def test_absent_server_features_are_refused_at_start(flags, capability):
    with pytest.raises(DDTreeArgumentError) as raised:
        check_absent_features(SimpleNamespace(**flags))
    assert str(raised.value) == CAPABILITIES[capability].refusal
    check_absent_features(SimpleNamespace(disaggregation_mode="null"))


# --- real releases ----------------------------------------------------------------------------

def _sites(report, path, form=None):
    """The gate sites of one file (prose -- messages and labels naming DFlash, KEEP -- is no gate)."""
    return [s for s in report.sites
            if s.path == path and s.form != "prose" and (form is None or s.form == form)]


@pytest.mark.slow
def test_named_gates_of_0_5_23_are_decided_by_capability(release_site):
    report = audit(from_folder(release_site("0.5.23")))
    assert report.ok, report.problems
    unified = _sites(report, "srt/arg_groups/kv_cache_hook.py")
    unified = [s for s in unified if s.qualname == "handle_unified_memory_pool" and s.form != "value"]
    assert unified and {(s.decision, s.capability) for s in unified} == {(Decision.KEEP, "unified-memory")}
    mask = _sites(report, "srt/speculative/spec_sampling_mask.py")
    assert mask and {(s.decision, s.capability) for s in mask} == {(Decision.NARROW, "sampling-mask")}
    grammar = [s for s in report.sites if s.qualname == "SpeculativeAlgorithm.supports_grammar_overlap"]
    assert [(s.decision, s.capability) for s in grammar] == [(Decision.WIDEN, "grammar")]  # masks built in verify
    hook = _sites(report, "srt/managers/scheduler.py", "request-hook")
    assert [s.decision for s in hook] == [Decision.EDIT]
    row = next(s.to_json() for s in grammar)
    assert row["capability"] == "grammar"


def _tree_digest(root) -> dict[str, str]:
    digest = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                digest[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return digest


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args], capture_output=True, text=True,
                          env={**os.environ, "DDTREE_PATCH_CACHE": "off"})


@pytest.mark.slow
def test_native_ddtree_is_recognised_and_never_patched(fresh_release):
    site = fresh_release("0.5.23")
    spec_info = site / "sglang/srt/speculative/spec_info.py"
    text = spec_info.read_text()
    assert "    DFLASH = auto()\n" in text
    spec_info.write_text(text.replace("    DFLASH = auto()\n", "    DFLASH = auto()\n    DDTREE = auto()\n", 1))
    (site / "sglang/srt/speculative/ddtree_worker.py").write_text("class DDTreeWorker:\n    pass\n")
    before = _tree_digest(site)

    applied = _cli("apply", "--target", str(site))
    assert applied.returncode == 14, applied.stdout + applied.stderr
    assert "ships DDTREE itself" in applied.stdout + applied.stderr
    dry = _cli("apply", "--dry-run", "--target", str(site))
    assert dry.returncode == 14
    assert _tree_digest(site) == before, "apply wrote over a native DDTree"

    report = audit(from_folder(site))
    assert report.state == "native"
    assert any("ships DDTREE itself" in p for p in report.problems)
    assert report.to_json()["native"] == [
        "srt/speculative/spec_info.py: SpeculativeAlgorithm.DDTREE",
        "srt/speculative/ddtree_worker.py: a DDTree module",
    ]
    status = _cli("status", "--json", "--target", str(site))
    assert '"native"' in status.stdout, status.stdout + status.stderr
    assert _tree_digest(site) == before
