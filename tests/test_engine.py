"""The engine on synthetic sources: new forms fail loudly, edits are byte-exact, the CLI renders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_patch.analyse import SourceText, analyse_file
from ddtree_patch.data.policy import default_policy
from ddtree_patch.sites import Decision

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"
RUNTIME_FILE = "srt/managers/scheduler.py"  # a path where the principles apply

INJECTED = {
    "match": 'def f(algo):\n    match algo:\n        case "DFLASH":\n            return 1\n',
    "dict-dispatch": 'def f(x):\n    return {"DFLASH": 1}[x]\n',
    "lowercase": 'def f(x):\n    return x.lower() == "dflash"\n',
    "getattr": 'def f():\n    return getattr(SpeculativeAlgorithm, "DFLASH")\n',
    "subscript": 'def f():\n    return SpeculativeAlgorithm["DFLASH"]\n',
    "chained": 'def f(a, b):\n    return a == "DFLASH" == b\n',
    "positional": 'def f(a):\n    return check(a, "DFLASH")\n',
    "enum-alias": "class SpeculativeAlgorithm(IntEnum):\n    DFLASH = 7\n",
    # longer strings naming DFLASH are sites unless proven text
    "regex": "def f(x):\n    return re.fullmatch('DFLASH|EAGLE', x)\n",
    "split-list": 'def f(x):\n    return x in "EAGLE,DFLASH".split(",")\n',
    "argv-fragment": 'def f():\n    return ["--speculative-algorithm=DFLASH"]\n',
    "dict-key": 'def f(x):\n    return {"dflash-v2": 1}[x]\n',
    "get-key": 'def f(d):\n    return d.get("DFlash mode")\n',
    "startswith": 'def f(x):\n    return x.upper().startswith("DFLASH-")\n',
    "f-string-key": 'def f(d, v):\n    return d[f"DFLASH-{v}"]\n',
    "lowercase-in": 'def f(x):\n    return x.casefold() in ("dflash", "eagle ")\n',
}

TEXT = {
    "docstring": 'def f():\n    """Runs DFLASH."""\n',
    "comment": "x = 1  # DFLASH only\n",
    "raise": 'def f(x):\n    raise ValueError(f"DFLASH needs {x}: " + "see DFLASH docs")\n',
    "raise-format": 'def f(x):\n    raise ValueError("DFLASH needs {}".format(x))\n',
    "logging-percent": 'def f(x):\n    logger.warning("DFLASH %s" % x)\n',
    "warnings": 'def f():\n    warnings.warn("DFLASH is slow")\n',
    "print": 'def f():\n    print("using DFLASH")\n',
    "help": 'def f(p):\n    p.add_argument("--x", help="DFLASH only.")\n',
    "description": 'p = ArgumentParser(description="Serve DFLASH")\n',
    "assert": 'def f(x):\n    assert x, "DFLASH needs x"\n',
    "identifier-like": 'def f(cfg):\n    return cfg.get("dflash_config")\n',
}


@pytest.mark.parametrize("name", sorted(INJECTED))
def test_injected_forms_are_unhandled(name):
    result = analyse_file(RUNTIME_FILE, INJECTED[name].encode(), default_policy())
    assert [s.decision for s in result.sites] and all(s.decision is Decision.UNHANDLED for s in result.sites)
    assert result.replacements == []


@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_stays_text(name):
    result = analyse_file(RUNTIME_FILE, TEXT[name].encode(), default_policy())
    assert result.sites == [] and result.replacements == []


def test_edits_keep_crlf_bom_and_untouched_bytes():
    data = b'\xef\xbb\xbf# header\r\nX = 1  # keep   spacing\r\nif a == "DFLASH":\r\n    pass\r\n'
    result = analyse_file(RUNTIME_FILE, data, default_policy())
    after = SourceText.decode(data).encode(result.replacements)
    assert after == data.replace(b'a == "DFLASH"', b'a in ("DFLASH", "DDTREE")')


def test_a_glob_never_decides_a_token_no_rule_claimed():
    """kv_cache_hook's unified-memory gate is a `*` entry: a new form there must still be UNHANDLED."""
    source = b'def handle_unified_memory_pool(args):\n    match args.algo:\n        case "DFLASH":\n            pass\n'
    result = analyse_file("srt/arg_groups/kv_cache_hook.py", source, default_policy())
    assert [(s.rule, s.decision) for s in result.sites] == [("", Decision.UNHANDLED)]


def test_text_and_references_are_counted_not_edited():
    source = b'"""DFlash docs."""\nfrom x import dflash_worker  # dflash comment\nraise ValueError("DFLASH requires x")\n'
    result = analyse_file(RUNTIME_FILE, source, default_policy())
    assert result.sites == [] and result.replacements == []
    assert result.mentions["reference"] == 1 and result.mentions["text"] == 3


def _cli(*args: str, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "DDTREE_PATCH_CACHE": "off"}
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args, "--target", str(site)],
                          capture_output=True, text=True, env=env)


@pytest.fixture
def mini_site(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site)
    return site


def test_audit_json_on_the_mini_site(mini_site):
    done = _cli("audit", "--json", site=mini_site)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "ddtree-patch/2" and report["command"] == "audit" and report["ok"] and report["state"] == "pristine"
    forms = {s["form"] for s in report["sites"]}
    assert {"enum-member", "predicate-def", "validation-hook", "worker-dispatch", "server-arg-field",
            "builtins-help", "membership"} <= forms
    assert report["summary"]["UNHANDLED"] == 0


def test_audit_fails_on_an_injected_site(mini_site):
    path = mini_site / "sglang" / "srt" / "speculative" / "spec_info.py"
    path.write_text(path.read_text() + '\n\ndef pick(x):\n    return {"DFLASH": 1}[x]\n')
    done = _cli("audit", site=mini_site)
    assert done.returncode == 1
    assert "UNHANDLED" in done.stdout and "spec_info.py:" in done.stdout


def test_dry_run_shows_diff_and_writes_nothing(mini_site):
    before = {p: p.read_bytes() for p in mini_site.rglob("*") if p.is_file()}
    done = _cli("apply", "--dry-run", site=mini_site)
    assert done.returncode == 0, done.stderr
    assert '+    DDTREE = auto()' in done.stdout
    assert "+            from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args" in done.stdout
    assert "sglang/srt/speculative/ddtree/__init__.py" in done.stdout
    after = {p: p.read_bytes() for p in mini_site.rglob("*") if p.is_file()}
    assert before == after


def test_unparseable_candidate_fails_the_audit(mini_site):
    (mini_site / "sglang" / "broken.py").write_text("def f(:\n    return 'DFLASH'\n")
    done = _cli("audit", "--json", site=mini_site)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and not report["ok"]
    assert report["files"]["skipped"][0]["path"] == "broken.py"


def test_version_and_help_examples():
    run = lambda *a: subprocess.run([sys.executable, "-m", "ddtree_patch", *a], capture_output=True, text=True)
    assert run("--version").stdout.strip().startswith("ddtree-patch ")
    for verb in ("audit", "apply", "revert", "status"):
        done = run(verb, "--help")
        assert done.returncode == 0 and "Example" in done.stdout, verb


def test_predicate_calls_are_applied_with_the_predicate():
    from ddtree_patch.sites import Site, with_carried

    def site(form, decision, applied):
        return Site("a.py", 1, 0, "f", "logic", form, form, decision, "", "", applied)

    calls = [site("predicate-call", Decision.WIDEN, False)]
    assert not with_carried(calls + [site("predicate-def", Decision.EDIT, False)])[0].applied
    assert with_carried(calls + [site("predicate-def", Decision.EDIT, True)])[0].applied
