"""Simulations of the balancer core (corral-sim; docs/balancer.md, "corral-sim")."""
