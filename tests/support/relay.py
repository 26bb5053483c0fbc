"""A byte relay between a TCP port on loopback and a Unix socket, either way round, so a process in a network
namespace that has only `lo` (LiteLLM's proxy under `unshare -n`) can reach a server on the host's loopback, and be
reached from it, through the filesystem (which the namespaces share). Standard library only: it runs under any python.

    python relay.py tcp:127.0.0.1:18000=unix:/run/x/engine.sock unix:/run/x/gw.sock=tcp:127.0.0.1:4000

Each argument is LISTEN=TARGET. Every accepted connection gets its own connection to the target; when either side
closes (or fails), both are closed at once, so a client that leaves the gateway makes the gateway's connection to the
engine close too (a disconnect reaches the engine: what the cancellation cases judge). A TCP listener binds loopback
only. It prints "ready" once every listener is up, and runs until it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import sys

CHUNK = 65536


def parse(spec: str) -> tuple[str, str, int]:
    """ "tcp:HOST:PORT" (a loopback address) or "unix:PATH" -> (kind, host-or-path, port)."""
    kind, _, rest = spec.partition(":")
    if kind == "unix" and rest:
        return "unix", rest, 0
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if ipaddress.ip_address(host).is_loopback and port.isdigit():
            return "tcp", host, int(port)
    raise SystemExit(f"relay: not tcp:LOOPBACK:PORT or unix:PATH: {spec!r}")


async def _open(target: tuple[str, str, int]):
    kind, where, port = target
    if kind == "unix":
        return await asyncio.open_unix_connection(where)
    return await asyncio.open_connection(where, port)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


def handler(target: tuple[str, str, int]):
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await _open(target)
        except OSError:
            _close(writer)
            return
        pumps = [asyncio.ensure_future(_pump(reader, up_writer)), asyncio.ensure_future(_pump(up_reader, writer))]
        # either direction ending ends the connection: both sides are closed, neither is left half-open
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for p in pumps:
            p.cancel()
        _close(up_writer)
        _close(writer)

    return relay


async def serve(pairs: list[tuple[tuple[str, str, int], tuple[str, str, int]]]) -> None:
    servers = []
    for listen, target in pairs:
        kind, where, port = listen
        if kind == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(where)
            servers.append(await asyncio.start_unix_server(handler(target), path=where))
        else:
            servers.append(await asyncio.start_server(handler(target), where, port))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> None:
    pairs = []
    for arg in argv:
        listen, sep, target = arg.partition("=")
        if not sep:
            raise SystemExit(f"relay: need LISTEN=TARGET, got {arg!r}")
        pairs.append((parse(listen), parse(target)))
    if not pairs:
        raise SystemExit("relay: nothing to relay")
    asyncio.run(serve(pairs))


if __name__ == "__main__":
    main(sys.argv[1:])
