"""End-to-end tests: the daemons together as real processes on loopback (supervisor, workers,
dashboard, etcd, a browser), marked ``e2e``."""
