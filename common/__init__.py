"""corral's pure core: protocol and codec, timer wheel, placement, balancer core.

Nothing in this package opens a socket, reads a clock or starts a thread: time is always a
parameter, and randomness is always a seeded ``random.Random`` passed in.
"""
