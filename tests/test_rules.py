"""Every rule's own examples: what it must rewrite (exactly) and what it must leave alone."""

from __future__ import annotations

import pytest

from ddtree_patch.analyse import SourceText, analyse_file
from ddtree_patch.policy import Entry, Policy, accept_all
from ddtree_patch.rules import RULES
from ddtree_patch.sites import Decision


def _transform(source: str) -> tuple[str, list]:
    data = source.encode()
    result = analyse_file("example.py", data, accept_all())
    assert result.skipped is None, result.skipped
    return SourceText.decode(data).encode(result.replacements).decode(), result.sites


NARROWINGS = [(rule, before, after) for rule in RULES for before, after in rule.MUST_NARROW]
REWRITES = [(rule.id, before, after) for rule in RULES for before, after in rule.MUST_REWRITE]
CLAIMS = [(rule.id, source) for rule in RULES for source in rule.MUST_CLAIM]
UNTOUCHED = [(rule.id, source) for rule in RULES for source in rule.MUST_NOT_TOUCH]


@pytest.mark.parametrize("rule_id,before,after", REWRITES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(REWRITES)])
def test_rule_rewrites(rule_id, before, after):
    output, sites = _transform(before)
    assert output == after
    assert any(site.rule == rule_id for site in sites)
    again, _ = _transform(output)
    assert again == output, "applying a rule twice must change nothing"
    compile(output, "example.py", "exec")


@pytest.mark.parametrize("rule_id,source", UNTOUCHED, ids=[f"{r}-{i}" for i, (r, _) in enumerate(UNTOUCHED)])
def test_rule_leaves_alone(rule_id, source):
    output, _ = _transform(source)
    assert output == source


@pytest.mark.parametrize("rule_id,source", CLAIMS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(CLAIMS)])
def test_rule_claims(rule_id, source):
    _, sites = _transform(source)
    assert [site.rule for site in sites] == [rule_id]


def test_every_rule_has_examples():
    for rule in RULES:
        assert rule.MUST_NOT_TOUCH, f"{rule.id} has no must-not-touch examples"
        assert rule.MUST_REWRITE or rule.decision is not Decision.EDIT, f"{rule.id} edits but shows no rewrite"


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
