"""Component tests: one piece with its real I/O — a daemon's loop over real sockets, a task
source against a real etcd, one `corral-worker` against a fake supervisor — and the tools run as
processes: the linters (ruff, mypy), pip building the wheel, the console scripts with bad flags.
They start a process or open a socket, so they are not unit tests (tests/unit stays in-process
and fast), and they do not need the system's daemons together, so they are not end-to-end
tests (tests/e2e: a real supervisor, real workers, etcd, a browser)."""
