"""Placement: which worker runs which task replica, toward one balance criterion.

The facade: code outside this package imports from here only (a test checks it); the modules
inside are its own. `Placement` holds the desired assignment and changes it through events,
each returning a `Diff`; `reconcile` judges what a worker reports against what it should run.
See docs/supervisor.md ("Balance criterion", "Failure domains and constraints") for the
criterion and the rules every change keeps.
"""

from .coverage import LEAST_UTILIZED, PROPORTIONAL, STRATEGIES
from .diff import Diff, Move, WorkerDiff
from .modes import Mode
from .placement import Placement
from .reconcile import Correction, correction, resolve_claims
from .shapes import TaskShape
from .verdicts import Assigned, Outlook
from .view import PlacementView
from .zones import PREFER, REQUIRE, SPREADS

__all__ = ["LEAST_UTILIZED", "PREFER", "PROPORTIONAL", "REQUIRE", "SPREADS", "STRATEGIES",
           "Assigned", "Correction", "Diff", "Mode", "Move", "Outlook", "Placement",
           "PlacementView", "TaskShape", "WorkerDiff", "correction", "resolve_claims"]
