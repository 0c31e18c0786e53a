"""The compat bundle's release file (gpurig/releases/*.txt) layered over the shared rig's pins.

scripts/gpurig_compat.sh hands gpurig/releases/<RELEASE>.txt to ../shared/gpurig/build.sh unchanged,
so these tests run build.sh's own layering code (its embedded Python, read from the file) on the
shared wheels.txt and our release file: the release's sglang pin must replace the rig's, every other
pin must stay, and the '#kernel' / '#stub' lines must not become pins. Skipped where the shared rig
is not beside the checkout (it is not part of this repository).
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RIG = REPO.parent / "shared" / "gpurig"
RELEASES = sorted((REPO / "gpurig" / "releases").glob("*.txt"))

needs_rig = pytest.mark.skipif(not (RIG / "build.sh").is_file(), reason="no ../shared/gpurig beside the checkout")


def layered_specs(release_file: Path) -> list[str]:
    """The wheel specs build.sh downloads for this release file, by build.sh's own code."""
    snippet = re.search(r"<<'PY'\n(.*?)\nPY\n", (RIG / "build.sh").read_text(), re.S).group(1)
    out = subprocess.run([sys.executable, "-", str(RIG / "wheels.txt"), str(release_file)], input=snippet,
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def name(spec: str) -> str:
    return re.split(r"[=<>!~ ]", spec, maxsplit=1)[0].lower().replace("-", "_")


@needs_rig
@pytest.mark.parametrize("release_file", RELEASES, ids=lambda p: p.stem)
def test_release_pins_replace_the_rigs_and_keep_the_rest(release_file: Path) -> None:
    base = [line.strip() for line in (RIG / "wheels.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    specs = layered_specs(release_file)
    assert f"sglang=={release_file.stem}" in specs
    assert not any(s.startswith("#") for s in specs), "a '#kernel' / '#stub' line became a pin"
    assert sorted(map(name, specs)) == sorted(map(name, base)), "a pin was lost or added twice"
    pins = [line.strip() for line in release_file.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert set(pins) <= set(specs)


@pytest.mark.parametrize("release_file", RELEASES, ids=lambda p: p.stem)
def test_release_file_names_existing_stand_ins_and_one_kernel(release_file: Path) -> None:
    lines = release_file.read_text().splitlines()
    kernels = [line.split()[1] for line in lines if line.startswith("#kernel ")]
    assert len(kernels) <= 1 and all(re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", k) for k in kernels)
    for stub in (line.split()[1] for line in lines if line.startswith("#stub ")):
        folder = stub.split("=", 1)[-1]
        if not (REPO / "gpurig" / "stubs-extra" / folder).is_dir() and RIG.is_dir():  # else: the rig's, not here
            assert (RIG / "stubs-extra" / folder).is_dir(), stub


def test_slimmer_drops_the_extra_prefixes(tmp_path: Path) -> None:
    """`scripts.rig.slim_sglang --drop PREFIX` (what gpurig_compat.sh makes of a '#drop PREFIX' line):
    those members go too, a name that only starts alike stays, the default drops still apply."""
    from tests.test_gpurig_slim_sglang import FILES, fake_bundle, gs, members

    extra = {"sglang/srt/rust_extensions/_server.cpython-312-x86_64-linux-gnu.so": b"\0" * 3000,
             "sglang/srt/rust_extensions/_server_args.py": b"kept = 1\n"}
    bundle = fake_bundle(tmp_path)
    wheel = gs.sglang_wheel(bundle)
    with zipfile.ZipFile(wheel, "a") as z:
        for member, data in extra.items():
            z.writestr(member, data)
    proc = subprocess.run([sys.executable, "-m", gs.__name__, str(bundle), "--drop", "sglang/srt/rust_extensions/_server."],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = members(gs.sglang_wheel(bundle))
    assert "sglang/srt/rust_extensions/_server.cpython-312-x86_64-linux-gnu.so" not in got
    assert got["sglang/srt/rust_extensions/_server_args.py"] == b"kept = 1\n"
    assert not any(name.startswith(gs.DROP) for name in got)
    assert all(got[name] == data for name, data in FILES.items() if not name.startswith(gs.DROP))
