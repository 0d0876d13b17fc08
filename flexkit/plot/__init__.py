"""``flexkit plot``: pictures of a run from its metrics records (matplotlib, an optional extra)."""
