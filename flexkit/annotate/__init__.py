"""``flexkit annotate``: measure a policy's pass rate per task and write it as a column."""
