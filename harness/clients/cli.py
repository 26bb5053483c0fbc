"""`harness clients list` and `harness clients install [NAME...]`: the pinned client environments the
`client.<name>.<feature>` cases run (harness.clients.spec)."""

from __future__ import annotations

import time
from typing import Any

from harness.clients.env import install_client, installed_client
from harness.clients.spec import CLIENTS
from harness.errors import UsageError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("clients", help="the pinned client environments the client.* cases run (list, install)")
    csub = p.add_subparsers(dest="clients_command", metavar="ACTION", required=True)
    ls = csub.add_parser("list", help="each client, its pinned version, and whether its environment is installed")
    ls.set_defaults(func=cmd_list)
    ins = csub.add_parser("install", help="build (or verify) the environments from their hashed locks")
    ins.add_argument("names", nargs="*", metavar="NAME", help=f"default: all ({', '.join(CLIENTS)})")
    ins.set_defaults(func=cmd_install)


def _names(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        raise UsageError(f"unknown client {unknown[0]!r}; known: {', '.join(CLIENTS)}")
    return names or list(CLIENTS)


def cmd_list(args: Any) -> int:
    for spec in CLIENTS.values():
        env = installed_client(spec)
        state = f"installed ({env.root.name})" if env else "not installed"
        features = ", ".join(spec.features)
        print(f"{spec.name:14} {spec.package} {spec.version:10} {spec.runtime:6} {state}; features: {features}")
    return 0


def cmd_install(args: Any) -> int:
    for name in _names(args.names):
        t0 = time.monotonic()
        env = install_client(CLIENTS[name])
        print(f"{name}: {env.root} ({time.monotonic() - t0:.1f} s)")
    return 0
