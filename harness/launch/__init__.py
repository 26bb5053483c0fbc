"""Launchers: start a pinned engine on loopback, wait until it is really ready, verify identity, always stop it."""
