"""Simulations of the balancer core (corral-sim)."""
