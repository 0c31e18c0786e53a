"""Every rule's own examples under the real policy: which rule owns each site, its decision, and
the exact rewrite; plus the policy's entries checked against the rule forms."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from ddtree_patch.analyse import SourceText, analyse_file
from ddtree_patch.data.policy import ENTRIES, default_policy
from ddtree_patch.policy import UNMATCHED, Entry, Policy
from ddtree_patch.rules import RULES
from ddtree_patch.sites import Decision

POLICY = default_policy()
FORMS = {rule.form for rule in RULES}


def _transform(source: str, policy: Policy = POLICY) -> tuple[str, list]:
    data = source.encode()
    result = analyse_file("example.py", data, policy)
    assert result.skipped is None, result.skipped
    return SourceText.decode(data).encode(result.replacements).decode(), result.sites


def _owned(sites: list, rule_id: str) -> list:
    return [site for site in sites if site.rule == rule_id]


NARROWINGS = [(rule, before, after) for rule in RULES for before, after in rule.MUST_NARROW]
REWRITES = [(rule.id, before, after) for rule in RULES for before, after in rule.MUST_REWRITE]
CLAIMS = [(rule.id, source, decision) for rule in RULES for source, decision in rule.MUST_CLAIM]
UNTOUCHED = [(rule.id, source) for rule in RULES for source in rule.MUST_NOT_TOUCH]


@pytest.mark.parametrize("rule_id,before,after", REWRITES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(REWRITES)])
def test_rule_rewrites(rule_id, before, after):
    output, sites = _transform(before)
    assert output == after
    owned = _owned(sites, rule_id)
    assert owned and all(s.decision in (Decision.WIDEN, Decision.EDIT) and not s.applied for s in owned), sites
    again, sites_after = _transform(output)
    assert again == output, "applying a rule twice must change nothing"
    # ("x in (DFLASH, DDTREE)" is then a membership test: whichever rule owns it, it is done)
    assert all(s.applied for s in sites_after if s.decision in (Decision.WIDEN, Decision.EDIT)), sites_after
    compile(output, "example.py", "exec")


@pytest.mark.parametrize("rule_id,source", UNTOUCHED, ids=[f"{r}-{i}" for i, (r, _) in enumerate(UNTOUCHED)])
def test_rule_leaves_alone(rule_id, source):
    """Unchanged, and the rule owns no site here unless its rewrite is already in place."""
    output, sites = _transform(source)
    assert output == source
    assert all(s.applied for s in _owned(sites, rule_id)), sites


@pytest.mark.parametrize("rule_id,source,decision", CLAIMS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CLAIMS)])
def test_rule_claims(rule_id, source, decision):
    output, sites = _transform(source)
    assert [(s.rule, s.decision) for s in sites] == [(rule_id, decision)]
    assert output == source  # a rule that only classifies writes nothing


def test_every_rule_proves_its_claim():
    for rule in RULES:
        assert rule.MUST_NOT_TOUCH, f"{rule.id} has no must-not-touch examples"
        assert rule.MUST_REWRITE or rule.MUST_CLAIM, f"{rule.id} shows no site it owns"


def test_policy_entries_name_real_forms():
    """A typo'd form would match no site and leave its gate to a later, more general entry."""
    unknown = [e for e in ENTRIES if e.form != UNMATCHED and not any(fnmatchcase(f, e.form) for f in FORMS)]
    assert unknown == []
    decided = {f for f in FORMS if any(e.form != UNMATCHED and fnmatchcase(f, e.form) for e in ENTRIES)}
    assert decided == FORMS, f"forms no entry decides: {FORMS - decided}"


@pytest.mark.parametrize("rule,before,after", NARROWINGS, ids=[f"{r.id}-{i}" for i, (r, _, _) in enumerate(NARROWINGS)])
def test_rule_narrows(rule, before, after):
    narrow_all = Policy((Entry(rule.form, Decision.NARROW, "example", capability="grammar"),))
    data = before.encode()
    result = analyse_file("example.py", data, narrow_all)
    output = SourceText.decode(data).encode(result.replacements).decode()
    assert output == after
    assert {s.decision for s in result.sites} == {Decision.NARROW}
    assert all(s.capability == "grammar" for s in result.sites)
    again = analyse_file("example.py", after.encode(), narrow_all)
    assert again.replacements == [] and all(s.applied for s in again.sites), "narrowing twice must change nothing"
    compile(output, "example.py", "exec")


def test_narrowing_a_form_that_cannot_narrow_is_unhandled():
    policy = Policy((Entry("equality", Decision.NARROW, "wrong", capability="grammar"),))
    result = analyse_file("example.py", b'if a == "DFLASH":\n    pass\n', policy)
    assert [s.decision for s in result.sites] == [Decision.UNHANDLED]
    assert result.replacements == []
