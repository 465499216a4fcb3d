"""Unit tests: the pure core (and the pure parts of the daemons) in-process, on a fake clock —
no processes, no sockets, no threads, no sleeps, hypothesis where a property holds. What
needs a process or a socket is a component or an end-to-end test."""
