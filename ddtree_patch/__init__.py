"""ddtree-patch: add DDTree speculative decoding to an installed SGLang, reversibly."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ddtree-patch")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"
