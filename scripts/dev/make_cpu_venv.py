"""Build (once, cached) the CPU venvs in which SGLang's own server-arg resolution is tested.

    python -m scripts.dev.make_cpu_venv            # the CI releases (venv_builder.RELEASES)
    python -m scripts.dev.make_cpu_venv 0.5.23     # just one

Each venv lands in $DDTREE_PATCH_VENV_CACHE/<version> (default ~/.cache/ddtree-patch/venvs; a post
release without a recipe of its own shares its base release's venv);
a venv that is already up to date is left alone. `tests/test_serverargs_behaviour.py` builds
them on demand too; this script is for warming a cache ahead of time and for timing a build.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.cpu_serverargs.venv_builder import RELEASES, ensure_venv
from tests.sglang_releases import install_release, release_metadata


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(RELEASES), help="SGLang releases")
    args = parser.parse_args()
    for version in args.versions:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"sglang-{version}-") as scratch:
            metadata = release_metadata(install_release(version, Path(scratch)), version)
        python = ensure_venv(version, metadata)
        print(f"sglang {version}: {python} ({time.monotonic() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
