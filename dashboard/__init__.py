"""corral-dashboard: a live web page of a corral fleet, its balance and every move
(docs/dashboard.md).

Its own process (so the supervisor stays lean and the page follows the leader under HA):
`follower` follows the supervisor with one control client, `roster`, `eventlog` and `history`
keep what it learnt (pure), `stream` pushes deltas to browsers over Server-Sent Events,
`web` serves the page and its API (aiohttp), `auth` guards the actions, `cli` starts it.
Imports `corral.common` and `corral.client` only.
"""
