"""Per-request refusals through each release's own request intake (CPU, real SGLang code).

A patched release's real `Scheduler.handle_generate_request` receives real `SamplingParams`
(tests/cpu_serverargs/request_probe.py, in the release's CPU venv): a DDTREE request asking for a
feature the capability table declares absent, or one whose implementation needs a helper this
release lacks (log-probs before 0.5.18, grammars before 0.5.17), is aborted with DDTree's message through the
scheduler's own abort path, a plain one goes on past the check (DFlash's real check ran and let it
through), and DFLASH requests are decided by DFlash alone, as before the patch.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from patches.capabilities import CAPABILITIES
from tests.cpu_serverargs.venv_builder import RELEASES
from tests.sglang_releases import patched_release

pytestmark = pytest.mark.slow

HELPERS = Path(__file__).resolve().parent / "cpu_serverargs"
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})
CASES = {
    "plain": {},
    "json_schema": {"sampling": {"json_schema": JSON_SCHEMA}},
    "regex": {"sampling": {"regex": "a+"}},
    "ebnf": {"sampling": {"ebnf": 'root ::= "a"'}},
    "logprob": {"return_logprob": True},
    "hidden_states": {"return_hidden_states": True},
    # what the tokenizer manager hands on once --enable-custom-logit-processor admits it
    "logit_processor": {"custom_logit_processor": '{"callable": "x"}'},
}
REFUSED_BY = {"json_schema": "grammar", "regex": "grammar", "ebnf": "grammar", "logprob": "logprobs",
              "hidden_states": "hidden-states-return", "sampling_mask": "sampling-mask",
              "logit_processor": "custom-logit-processor"}


def _cases(version: str) -> dict:
    if Version(version) >= Version("0.5.22"):  # return_sampling_mask exists from 0.5.22
        return {**CASES, "sampling_mask": {"return_sampling_mask": True}}
    return CASES


def _probe(python: Path, site: Path, algorithm: str, cases: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{HELPERS}", "PYTHONNOUSERSITE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(python), str(HELPERS / "request_probe.py"), "--algorithm", algorithm,
                           "--cases", json.dumps(cases)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert Path(report["sglang_file"]).is_relative_to(site), "probe imported another sglang"
    return report["cases"]


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, tmp_path_factory):
    version = request.param
    site, python = patched_release(version, tmp_path_factory.mktemp(f"requests-{version}"))
    return version, python, site


def test_ddtree_refuses_absent_features_per_request(patched):
    version, python, site = patched
    outcomes = _probe(python, site, "DDTREE", _cases(version))
    assert outcomes["plain"]["outcome"] == "served", outcomes["plain"]
    assert outcomes["plain"]["checked"] == 1, "DFlash's own request check must still run for DDTREE"
    refused = dict(REFUSED_BY)
    if Version(version) >= Version("0.5.18"):  # SGLang's speculative log-prob helper exists: served
        del refused["logprob"]
        assert (outcomes["logprob"]["outcome"], outcomes["logprob"]["checked"]) == ("served", 1), outcomes["logprob"]
    if Version(version) >= Version("0.5.17"):  # SGLang's tree grammar walk for DFlash-family workers: served
        for case in ("json_schema", "regex", "ebnf"):
            del refused[case]
            assert (outcomes[case]["outcome"], outcomes[case]["checked"]) == ("served", 1), outcomes[case]
    for case, capability in refused.items():
        if case in outcomes:
            assert outcomes[case] == {"outcome": "aborted", "message": CAPABILITIES[capability].refusal,
                                      "checked": 0}, (case, outcomes[case])


def test_dflash_requests_are_decided_by_dflash_alone(patched):
    version, python, site = patched
    outcomes = _probe(python, site, "DFLASH", {k: CASES[k] for k in ("plain", "json_schema", "logprob")})
    assert outcomes["plain"]["outcome"] == "served"
    for case in ("json_schema", "logprob"):
        outcome = outcomes[case]
        assert outcome["checked"] == 1
        # 0.5.15's DFlash refuses logprobs and grammars itself; 0.5.23's serves both.
        assert outcome["outcome"] == "served" or outcome["message"].startswith("DFLASH"), outcome
