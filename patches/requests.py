"""Per-request refusals: a DDTREE request asking for a feature DDTree lacks is aborted, alone.

The patched scheduler calls `validate_ddtree_request` where it validates requests for DFlash
(before DFlash's own check), and aborts the request with the returned message through its usual
path, so the server keeps serving every other request. Which features are refused, and the
messages, come from the capability table (`capabilities.py`). Fields are read with defaults so one
function fits every release (0.5.11 has no `return_sampling_mask`, ...).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Optional

from .capabilities import Capability, capability

GRAMMAR_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")


def requested_features(req: Any) -> list[str]:
    """Capability names this request needs beyond a plain generation, in a fixed order."""
    params = getattr(req, "sampling_params", None)
    wanted = []
    if any(getattr(params, name, None) is not None for name in GRAMMAR_FIELDS):
        wanted.append("grammar")
    if getattr(req, "return_logprob", False):
        wanted.append("logprobs")
    if getattr(req, "return_hidden_states", False):
        wanted.append("hidden-states-return")
    if getattr(req, "return_sampling_mask", False):
        wanted.append("sampling-mask")
    if getattr(req, "custom_logit_processor", None):
        wanted.append("custom-logit-processor")
    return wanted


@functools.cache
def _provides(needs: str) -> bool:
    """Whether the installed SGLang defines `module:attribute`."""
    module, _, attribute = needs.partition(":")
    try:
        return hasattr(importlib.import_module(module), attribute)
    except ImportError:
        return False


def implemented_here(feature: Capability) -> bool:
    """The capability is admitted and this SGLang provides what its implementation calls."""
    return feature.admitted and (not feature.needs or _provides(feature.needs))


def validate_ddtree_request(spec_algorithm: Any, req: Any) -> Optional[str]:
    """The abort message for a DDTREE request DDTree cannot serve; None to serve it (or not DDTREE)."""
    is_ddtree = getattr(spec_algorithm, "is_ddtree", None)
    if not (callable(is_ddtree) and is_ddtree()):
        return None
    for name in requested_features(req):
        feature = capability(name)
        if not implemented_here(feature):
            return feature.refusal
    return None
