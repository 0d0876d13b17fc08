"""The step loop of ``flexkit run``: the runner, one step, the run folder, counters, progress, replay and dynamic
sampling, the simulated trainer, trackers."""
