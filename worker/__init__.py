"""The corral worker agent: reports its state, applies instruction sets, runs tasks
(docs/worker.md)."""
