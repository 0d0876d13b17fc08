"""The taskset scheduler: batches drawn across tasksets, taskset mixing, prefetch, and the selector feedback path."""
