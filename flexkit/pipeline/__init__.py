"""The pipeline: a validated TOML wired into a scheduler and a sample stage, its checkpoints and fingerprints."""
