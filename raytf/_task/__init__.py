"""Inside a task's actor (or a script's child process): where TensorFlow is imported, lazily, after the task's
environment is set. Builds the strategy, runs the user's function or script, counts and reports progress,
writes and uploads checkpoints. Never imports the driver."""
