"""Clients as judges (issue 33): pinned client environments (spec, env), the drivers run with them (drivers/, run),
and the loopback recording proxy they talk to the server through (proxy)."""
