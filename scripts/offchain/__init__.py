"""The off-chain oracle: a hand-built target and draft whose accepted paths leave the first-child chain."""
