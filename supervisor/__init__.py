"""The corral supervisor daemon: owns the task list and decides which worker runs which task."""
