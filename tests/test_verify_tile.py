"""patches/verify_tile.py on SGLang 0.5.15's own Triton extend kernel (CPU, interpreted): with
DDTREE_VERIFY_TILE set, a call that carries a custom mask launches with that tile and gives the
same attention; an unmasked call keeps SGLang's tile; the block-size function is restored even
when the launch raises. Runs in a subprocess with the cached 0.5.15 CPU venv (real SGLang on
PYTHONPATH); the spec parsing runs here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.release_probe import run_probe

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.5.15"

PROBE = r"""
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("verify_tile", sys.argv[1])
vt = importlib.util.module_from_spec(spec); spec.loader.exec_module(vt)
from sglang.srt.layers.attention.triton_ops import extend_attention as ea

launches, real, fail = [], ea._fwd_kernel, []
class Launch:  # records the tile each launch asks for, then runs SGLang's kernel
    def __getitem__(self, grid):
        def run(*args, **kw):
            launches.append([kw["BLOCK_M"], kw["BLOCK_N"], kw["num_warps"]])
            if fail:
                raise RuntimeError("launch failed")
            return real[grid](*args, **kw)
        return run
ea._fwd_kernel = Launch()

torch.manual_seed(0)
B, EXT, PRE, H, KV, D = 2, 20, 9, 4, 2, 32
qo = torch.tensor([0, EXT, 2 * EXT]); kvp = torch.tensor([0, PRE, 2 * PRE], dtype=torch.int32)
kvi = torch.arange(2 * PRE); kb, vb = torch.randn(2 * PRE, KV, D), torch.randn(2 * PRE, KV, D)
q, k, v = torch.randn(B * EXT, H, D), torch.randn(B * EXT, KV, D), torch.randn(B * EXT, KV, D)
tree = torch.rand(EXT, EXT) < 0.4
tree = (tree.tril(-1) | torch.eye(EXT, dtype=torch.bool))
mask = torch.cat([torch.cat([torch.ones(EXT, PRE, dtype=torch.bool), tree], 1).flatten()] * B)
mask_indptr = torch.tensor([0, EXT * (PRE + EXT), 2 * EXT * (PRE + EXT)])

def attend(custom_mask):
    o = torch.empty_like(q)
    ea.extend_attention_fwd(q, k, v, o, kb, vb, qo, kvp, kvi, custom_mask, True, mask_indptr, EXT,
                            1.0, 1.0)
    return o

base_masked, base_causal = attend(mask), attend(None)
default = launches[-1]
sizes = ea._get_block_sizes_for_extend_attention
assert vt.install({}) is None and ea.extend_attention_fwd.__name__ == "extend_attention_fwd"
tile = vt.install({"DDTREE_VERIFY_TILE": "M16N16w2"})
assert vt.install({"DDTREE_VERIFY_TILE": "M16N16w2"}) == tile  # idempotent
try:
    vt.install({"DDTREE_VERIFY_TILE": "M32N32w4"}); conflict = None
except RuntimeError as e:
    conflict = str(e)
launches.clear()
masked, causal = attend(mask), attend(None)
fail.append(1)
try:
    attend(mask); raised = False
except RuntimeError:
    raised = True
print(json.dumps({"tile": tile, "default": default, "launches": launches, "conflict": conflict,
                  "raised": raised, "restored": ea._get_block_sizes_for_extend_attention is sizes,
                  "masked_diff": (masked - base_masked).abs().max().item(),
                  "causal_same": torch.equal(causal, base_causal),
                  "mask_matters": (base_masked - base_causal).abs().max().item()}))
"""


@pytest.fixture(scope="module")
def probe(release_site) -> dict:
    return run_probe(VERSION, release_site, PROBE, str(REPO / "patches" / "verify_tile.py"))


@pytest.mark.heavy
def test_a_masked_call_launches_with_the_tile_and_attends_the_same(probe: dict) -> None:
    assert probe["tile"] == [16, 16, 2] and probe["default"] != [16, 16, 2]
    masked, causal, failed = probe["launches"]
    assert masked == [16, 16, 2] and failed == [16, 16, 2]
    assert probe["mask_matters"] > 0.05  # the tree mask changes the output, so equal outputs mean something
    assert probe["masked_diff"] < 1e-5


@pytest.mark.heavy
def test_an_unmasked_call_keeps_sglangs_tile(probe: dict) -> None:
    assert probe["launches"][1] == probe["default"] and probe["causal_same"]


@pytest.mark.heavy
def test_the_block_size_function_is_restored_after_a_failed_launch(probe: dict) -> None:
    assert probe["raised"] and probe["restored"]


@pytest.mark.heavy
def test_a_second_install_with_another_tile_is_refused(probe: dict) -> None:
    assert "already installed with tile (16, 16, 2), now asked for (32, 32, 4)" in probe["conflict"]


@pytest.mark.parametrize("spec", ["M16N64", "m16n64w4", "M24N64w4", "M16N64w3", "M16N64w4x"])
def test_a_malformed_tile_is_refused_with_the_accepted_form(spec: str) -> None:
    import importlib.util

    loader = importlib.util.spec_from_file_location("verify_tile", REPO / "patches" / "verify_tile.py")
    vt = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(vt)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"expected M<BLOCK_M>N<BLOCK_N>w<warps> .* e\.g\. M16N64w4"):
        vt.parse_tile(spec)
    assert vt.parse_tile(" M16N64w4 ") == (16, 64, 4)


def _module():
    import importlib.util

    loader = importlib.util.spec_from_file_location("verify_tile", REPO / "patches" / "verify_tile.py")
    vt = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(vt)  # type: ignore[union-attr]
    return vt


@pytest.mark.parametrize("environ, capability, chosen", [
    ({}, (9, 0), "M16N64w4"),  # Hopper: the tile measured on the H200
    ({}, (8, 0), ""),  # not measured elsewhere: SGLang's tile
    ({}, None, ""),  # no CUDA device
    ({"DDTREE_VERIFY_TILE": "M32N64w4"}, (9, 0), "M32N64w4"),
    ({"DDTREE_VERIFY_TILE": "M32N64w4"}, (8, 9), "M32N64w4"),
    ({"DDTREE_VERIFY_TILE": "sglang"}, (9, 0), ""),
    ({"DDTREE_VERIFY_TILE": " "}, (9, 0), "M16N64w4"),
])
def test_the_tile_is_the_measured_default_unless_the_variable_says_otherwise(environ, capability, chosen) -> None:
    assert _module().chosen_spec(environ, capability) == chosen
