"""Data, kept apart from mechanism: the policy table and the supported releases."""
