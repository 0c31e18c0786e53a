"""Which SGLang releases the patch knows. Data only; the engine decides sites without per-release tables."""

from packaging.version import Version

FIRST_WITH_DFLASH = "0.5.11"  # DFLASH (and so DDTree's draft runner) first shipped here
NEWEST_KNOWN = "0.5.23"  # newest release the test suite has patched; newer ones warn (or fail with --strict)
TESTED = ("0.5.11", "0.5.12", "0.5.15", "0.5.23")  # installed from the index by the slow tests
# On the index beside their base releases, with other runtime files: `pip install sglang==0.5.15.*`
# gives 0.5.15.post1, so each is patched and contract-checked like a release of its own.
POST_RELEASES = ("0.5.12.post1", "0.5.13.post1", "0.5.15.post1")
# Every release with DFLASH, oldest first (a post release right after its base): what the slow
# worker-contract test covers.
WITH_DFLASH = tuple(sorted((*(f"0.5.{n}" for n in range(11, 24)), *POST_RELEASES), key=Version))
