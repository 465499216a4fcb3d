"""The chaos harness behind ``scripts/chaos``: one concept per module.

- `proxy`    a fault-injecting TCP proxy on loopback (black-hole either direction, delay)
- `schedule` the seeded fault plan
- `fleet`    the real processes: a supervisor and its workers, started and stopped by pid
- `checker`  the invariants, judged from the merged task journals
- `harness`  runs a plan against a fleet and reports
"""
