"""The wire: every message's schema (`protocol`) and its msgpack codec, the routing map, task
lists, and the control verbs as data (`verbs`). What crosses a socket or a file is defined
here once. Pure: no sockets, files or clocks. See docs/protocol.md.
"""
