"""Reading listening sockets from /proc: the loopback-only check run after every launch."""

from __future__ import annotations


def test_listening_sockets_reads_proc_for_this_process():
    import os
    import socket

    from harness.launch.listening import listening_sockets, non_loopback

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = listening_sockets({os.getpid()})
        assert ("127.0.0.1", port) in found
        assert non_loopback(found) == []
    assert non_loopback([("0.0.0.0", 1), ("::", 2), ("::1", 3), ("127.0.0.2", 4)]) == [("0.0.0.0", 1), ("::", 2)]
