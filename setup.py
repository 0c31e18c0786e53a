"""Packaging that pyproject.toml cannot say: every `ddtree_patch` package is found, not listed.

`patches/` and `kernels/` live beside the package in the checkout (the layout the design names) and
ship inside the wheel as `ddtree_patch/patches` and `ddtree_patch/kernels` (dropins.py reads them
from either place), so no generic top-level names leak into site-packages. A hand-kept list once
left `ddtree_patch.transaction` out of the wheel; discovery cannot.
"""

from setuptools import find_packages, setup

DROPINS = {"ddtree_patch.patches": "patches", "ddtree_patch.kernels": "kernels"}

setup(packages=[*find_packages(include=["ddtree_patch", "ddtree_patch.*"]), *DROPINS], package_dir=DROPINS)
