"""The run engine: the commands that talk to hosts (commands), ansible-runner and its event
stream (runner), the drift comparison (drift) and live progress (progress)."""
