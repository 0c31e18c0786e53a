"""Which SGLang releases the patch knows. Data only; the engine decides sites without per-release tables."""

FIRST_WITH_DFLASH = "0.5.11"  # DFLASH (and so DDTree's draft runner) first shipped here
NEWEST_KNOWN = "0.5.23"  # newest release the test suite has patched; newer ones warn (or fail with --strict)
TESTED = ("0.5.11", "0.5.12", "0.5.15", "0.5.23")  # installed from the index by the slow tests
# Every release with DFLASH, oldest first: what the slow worker-contract test covers.
WITH_DFLASH = tuple(f"0.5.{n}" for n in range(11, 24))
