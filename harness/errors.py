"""One error tree for the whole harness.

    HarnessError                      exit_code 2 unless said otherwise
    ├── UsageError                    the command line was wrong
    ├── ManifestError                 a manifest (or scenario/prompt file) is malformed: names the file and the field
    │   └── PinMismatch               a pinned hash/digest/version does not match what is on disk: shows both
    ├── RefusedError                  a safety rule refused the action (non-loopback address, busy port, ...)
    ├── DockerUnavailable             no Docker daemon answers
    ├── InstallError                  building/verifying an engine environment failed
    ├── DataError                     a recorded file (golden, events, report) is corrupt: names file and line
    ├── OutputError                   an output cannot be written, or would replace an input or an existing result
    ├── WireError                     exit_code 1: an HTTP exchange failed below HTTP (mapped once, in harness.client)
    │   ├── WireConnectError          no connection: refused, or the client gave up connecting
    │   ├── WireTimeout               a read or write timed out
    │   └── WireProtocolError         not HTTP, bad framing, or the connection broke mid-exchange
    └── LaunchError                   exit_code 1: the engine could not be brought up or died
        ├── StartupTimeout            not ready in time (carries the log tail)
        ├── EngineExited              the process/container exited (carries the log tail)
        └── IdentityMismatch          /version or /info disagrees with the manifest

Engine *misbehaviour* found by a check is a verdict, never an exception.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness reports to a user as one line."""

    exit_code = 2

    def one_line(self) -> str:
        # The first line by "\n" only: str.splitlines() also splits on \r and other controls, which would cut a
        # quoted server text where it hides its escape (the CLI shows the rest escaped).
        return str(self).split("\n", 1)[0] if str(self) else type(self).__name__


class UsageError(HarnessError):
    pass


class ManifestError(HarnessError):
    def __init__(self, path: object, field: str, message: str):
        self.path, self.field, self.message = str(path), field, message
        super().__init__(f"{self.path}: {field}: {message}")


class PinMismatch(HarnessError):
    def __init__(self, what: str, pinned: str, actual: str, where: str = ""):
        self.what, self.pinned, self.actual = what, pinned, actual
        loc = f" ({where})" if where else ""
        super().__init__(f"{what} mismatch{loc}: pinned {pinned}, found {actual}; refusing to launch")


class RefusedError(HarnessError):
    pass


class DockerUnavailable(HarnessError):
    pass


class InstallError(HarnessError):
    pass


class DataError(HarnessError):
    pass


class OutputError(HarnessError):
    pass


class WireError(HarnessError):
    exit_code = 1


class WireConnectError(WireError):
    pass


class WireTimeout(WireError):
    pass


class WireProtocolError(WireError):
    pass


class LaunchError(HarnessError):
    exit_code = 1

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message)

    def details(self) -> str:
        return self.log_tail


class StartupTimeout(LaunchError):
    pass


class EngineExited(LaunchError):
    pass


class IdentityMismatch(LaunchError):
    pass
