"""scripts/train/pair.py at its CPU-sized preset, checked against SGLang 0.5.15's own DFlash draft.

The GPU run trains the real pair; here the tiny preset runs every step (tokenizer, target,
drafter, offline estimate, saving) in the release's CPU venv, twice with one seed (same bytes) and
once with another (different bytes), and SGLang's `DFlashDraftModel` must parse the drafter's
config, load every weight, and compute the same block function as our training module
(tests/cpu_serverargs/pair_load_probe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cpu_serverargs.venv_builder import ensure_venv
from tests.sglang_releases import release_metadata

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.5.15"


@pytest.fixture(scope="module")
def venv(release_site) -> tuple[Path, Path]:
    site = release_site(VERSION)
    return ensure_venv(VERSION, release_metadata(site, VERSION)), site


def _train(python: Path, out: Path, seed: int, *options: str) -> dict:
    done = subprocess.run(
        [str(python), "-m", "scripts.train.pair", str(out), "--preset", "tiny", "--device", "cpu",
         "--seed", str(seed), *options],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONNOUSERSITE": "1"}, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def trained(venv, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("pair") / "seed0"
    return out, _train(venv[0], out, 0)


@pytest.mark.heavy
def test_pair_layout_and_manifest(trained) -> None:
    out, manifest = trained
    draft_cfg = json.loads((out / "draft" / "config.json").read_text())
    assert draft_cfg["architectures"] == ["DFlashDraftModel"]
    assert draft_cfg["dflash_config"]["mask_token_id"] == 1
    assert json.loads((out / "target" / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    assert json.loads((out / "target" / "tokenizer_config.json").read_text())["mask_token"] == "<|MASK|>"
    assert manifest["draft"]["steps_done"] == manifest["draft"]["steps_planned"]
    est = manifest["held_out_estimate"]
    assert est["dflash_tokens_per_round"] >= 1.0 and set(est["ddtree_tokens_per_round"]) == {"4", "8", "16", "32", "64"}
    assert all(v >= 1.0 for v in est["ddtree_tokens_per_round"].values())
    assert set(manifest["sha256"]) == {"draft/model.safetensors", "target/model.safetensors"}


@pytest.mark.heavy
def test_same_seed_same_bytes_other_seed_other_bytes(venv, trained, tmp_path) -> None:
    _, first = trained
    assert _train(venv[0], tmp_path / "again", 0)["sha256"] == first["sha256"]
    other = _train(venv[0], tmp_path / "seed1", 1)["sha256"]
    assert all(other[k] != first["sha256"][k] for k in other)


@pytest.mark.heavy
def test_sglang_loads_the_pair_and_its_draft_matches_the_training_module(venv, trained) -> None:
    python, site = venv
    out, _ = trained
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1", "SGLANG_USE_CPU_ENGINE": "1"}
    done = subprocess.run(
        [str(python), "-m", "tests.cpu_serverargs.pair_load_probe", str(out)],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["block_size"] == 4 and report["mask_token_id"] == 1
    assert report["target_layer_ids"] == [0, 1] and report["num_context_features"] == 2
    assert report["not_loaded"] == [] and report["target_not_loaded"] == [] and report["target_params"] > 5
    assert report["max_abs_diff"] < 1e-4 * max(1.0, report["max_abs"])


@pytest.fixture(scope="module")
def widened(venv, trained, tmp_path_factory) -> tuple[Path, dict]:
    """The tiny pair widened to scripts/train/widen.py's `small` shape (its checks run on the CPU)."""
    out = tmp_path_factory.mktemp("wide") / "pair"
    done = subprocess.run(
        [str(venv[0]), "-m", "scripts.train.widen", str(trained[0]), str(out), "--shape", "small", "--device", "cpu"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONNOUSERSITE": "1"}, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return out, json.loads((out / "manifest.json").read_text())


@pytest.mark.heavy
def test_the_widened_pair_computes_what_the_pair_does(trained, widened) -> None:
    """Wider hidden, MLP, heads, vocab and more layers: the target's and the drafter's logits over the
    trained vocab stay the pair's (float32, within rounding), and no new token reaches a top 64."""
    out, manifest = widened
    tcfg = json.loads((out / "target" / "config.json").read_text())
    dcfg = json.loads((out / "draft" / "config.json").read_text())
    assert (tcfg["hidden_size"], tcfg["num_hidden_layers"], tcfg["num_attention_heads"], tcfg["vocab_size"]) == (
        256, 5, 8, 700)
    assert dcfg["num_hidden_layers"] == 3 and dcfg["num_target_layers"] == 5
    assert dcfg["dflash_config"] == json.loads((trained[0] / "draft" / "config.json").read_text())["dflash_config"]
    for name in ("target", "draft"):
        r = manifest["widened"]["check"][name]
        assert r["argmax_agree"] == 1.0 and r["new_token_margin_vs_top64"] < -100, r
        assert r["max_abs_diff"] < 1e-3 * max(1.0, r["logit_range"]), r
    assert (out / "target" / "tokenizer.json").read_bytes() == (trained[0] / "target" / "tokenizer.json").read_bytes()
    assert (out / "prompts.json").read_bytes() == (trained[0] / "prompts.json").read_bytes()  # what the bench serves
    from scripts.bench import e2e as bench_e2e

    assert "widened by `scripts/train/widen.py` to hidden 256, MLP 320, 5 target layers (8 x 32 query / 2 x 32 KV " \
        "heads)" in bench_e2e.pair_notes(out)[0]


@pytest.mark.heavy
def test_sglang_loads_the_widened_pair(venv, widened) -> None:
    """SGLang 0.5.15's own Qwen3 and DFlashDraftModel load every widened weight, and its draft computes
    what the training module computes on the widened weights."""
    python, site = venv
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1", "SGLANG_USE_CPU_ENGINE": "1"}
    done = subprocess.run(
        [str(python), "-m", "tests.cpu_serverargs.pair_load_probe", str(widened[0])],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # a tensor equal before and after loading can only be an all-zero one of the layers widen_pair adds
    # (trained: 3 target layers, 1 draft layer), where SGLang's init happened to be zeros too
    assert {int(n.split(".")[2]) for n in report["target_not_loaded"]} <= {3, 4}
    assert {int(n.split(".")[1]) for n in report["not_loaded"]} <= {1, 2}
    assert report["max_abs_diff"] < 1e-4 * max(1.0, report["max_abs"])


@pytest.mark.heavy
def test_the_benchmark_report_describes_the_pair(trained) -> None:
    from scripts.bench import e2e as bench_e2e

    out, manifest = trained
    notes = " ".join(bench_e2e.pair_notes(out))
    assert f"{manifest['draft']['steps_done']} steps" in notes and "DDTree by budget {'4':" in notes


def test_preset_overrides_parse_as_the_field_type_and_refuse_unknown_fields() -> None:
    from scripts.train import pair as train_pair

    p = train_pair.with_overrides(train_pair.PRESETS["gpu"], ["draft_steps=10", "target_layer_ids=1,2",
                                                              "draft_lr=1e-3", "max_files=5"])
    assert (p.draft_steps, p.target_layer_ids, p.draft_lr, p.max_files) == (10, [1, 2], 1e-3, 5)
    assert train_pair.PRESETS["gpu"].draft_steps == 2000  # the preset itself is untouched
    for bad, msg in (("nope=1", "FIELD one of"), ("draft_steps=x", "invalid literal"), ("draft_steps", "FIELD=VALUE")):
        with pytest.raises(SystemExit, match=msg):
            train_pair.with_overrides(train_pair.PRESETS["gpu"], [bad])


@pytest.fixture(scope="module")
def trained_strong(venv, tmp_path_factory) -> tuple[Path, dict]:
    """The tiny preset with the `strong` preset's data options: the mixed corpus, a drafter on greedy rows."""
    out = tmp_path_factory.mktemp("strong") / "seed0"
    return out, _train(venv[0], out, 0, "--set", "corpus=mixed", "--set", "draft_labels=greedy")


@pytest.mark.heavy
def test_mixed_corpus_and_greedy_rows_are_seeded_and_recorded(venv, trained_strong, tmp_path) -> None:
    out, first = trained_strong
    assert first["corpus"]["name"] == "mixed" and first["corpus"]["structured_docs"]["held_out"] > 0
    assert first["draft"]["greedy_data"]["rows_done"] == first["sizes"]["greedy_rows"] == 8
    prompts = json.loads((out / "prompts.json").read_text())
    assert len(prompts) == 64 and {len(p) for p in prompts} == {first["sizes"]["eval_prompt_len"]}
    again = _train(venv[0], tmp_path / "again", 0, "--set", "corpus=mixed", "--set", "draft_labels=greedy")
    assert again["sha256"] == first["sha256"]
    assert (tmp_path / "again" / "prompts.json").read_bytes() == (out / "prompts.json").read_bytes()
    stdlib_only = _train(venv[0], tmp_path / "stdlib", 0, "--set", "draft_labels=greedy")["sha256"]
    assert stdlib_only["target/model.safetensors"] != first["sha256"]["target/model.safetensors"]


@pytest.mark.heavy
def test_greedy_rows_are_the_targets_own_greedy_continuations(venv, trained_strong) -> None:
    """The KV-cached rows the drafter trains on equal plain greedy decoding by full recomputation."""
    python, _ = venv
    out, _ = trained_strong
    probe = f"""
import torch
from scripts.train import pair as train_pair
from transformers import Qwen3ForCausalLM
p = train_pair.with_overrides(train_pair.PRESETS['tiny'], ['greedy_rows=3'])
model = Qwen3ForCausalLM.from_pretrained({str(out / 'target')!r}).eval()
stream = torch.randint(2, p.vocab, (500,), generator=torch.Generator().manual_seed(1))
rows, log = train_pair.greedy_rows(model, stream, p, torch.Generator().manual_seed(2), print)
ref = train_pair.greedy(model, rows[:, :p.eval_prompt_len], p.seq - p.eval_prompt_len)
assert rows.shape == (3, p.seq) and log['rows_done'] == 3, (rows.shape, log)
assert torch.equal(rows, ref), (rows, ref)
print('OK')
"""
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONNOUSERSITE": "1"}, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout[-2000:] + done.stderr[-3000:]


def test_structured_documents_are_seeded_and_repeat_their_choices() -> None:
    from scripts.train import structured_corpus

    docs = structured_corpus.documents(1, 20_000)
    assert docs == structured_corpus.documents(1, 20_000) and docs != structured_corpus.documents(2, 20_000)
    assert sum(map(len, docs)) >= 20_000 and len({d.split()[0] for d in docs}) >= 4  # every kind in turn
    table = docs[0].splitlines()
    n = int(table[1].split()[0])
    assert all(line.split()[-1] == str(n * int(line.split()[2])) for line in table[1:])


def test_the_time_schedule_anneals_a_capped_phase_and_the_step_schedule_ignores_time() -> None:
    import time

    from scripts.train import pair as train_pair

    peak = 2e-3
    assert train_pair.lr_at(500, 4000, peak, 100, time_frac=1.0) == pytest.approx(0.1 * peak)  # the cap is the end
    assert train_pair.lr_at(500, 4000, peak, 100, time_frac=0.5) == pytest.approx(0.55 * peak)
    assert train_pair.lr_at(500, 4000, peak, 100) == pytest.approx(train_pair.lr_at(500, 4000, peak, 100, 0.01))
    started = time.time() - 30
    assert train_pair.time_progress(train_pair.PRESETS["gpu"], started, 60) == 0.0  # same bytes on every machine
    assert train_pair.time_progress(train_pair.PRESETS["strong"], started, 60) == pytest.approx(0.5, abs=0.05)
