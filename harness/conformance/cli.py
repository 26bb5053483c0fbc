"""Subcommands of this feature (filled in by its issue)."""


def register(sub) -> None:
    pass
