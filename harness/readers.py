"""One bounded reader per file format: bytes, text, JSON, JSON Lines, YAML.

Every reader refuses what is not a regular file (a FIFO or a device would block or never end), stops at a size limit,
refuses nesting deeper than a limit, and turns every problem into the harness's own error naming the file (and the line
where there is one): `ManifestError` for inputs a person wrote (manifests, scenarios, prompt sets, expectations),
`DataError` for recorded data (golden files, events, reports, traces). Nothing here ever raises anything else.

    obj = read_json(path, "golden meta", error: ErrorType = DataError)
    for lineno, obj in iter_jsonl(path, "events"):
        ...
    raw = read_yaml(path, "manifest")               # duplicate keys are an error, with both lines
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import yaml

from harness.errors import DataError, HarnessError, ManifestError

ErrorType = type[HarnessError]

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_DATA_BYTES",
    "MAX_DEPTH",
    "read_bytes",
    "read_text",
    "read_json",
    "parse_json",
    "iter_jsonl",
    "read_yaml",
    "parse_yaml",
    "check_depth",
    "fail",
]

MAX_INPUT_BYTES = 4 << 20  # a manifest, scenario, prompt set or expectation file is a few KB
MAX_DATA_BYTES = 512 << 20  # recorded data (events.jsonl of a long load test) can be large, not unbounded
MAX_LINE_BYTES = 16 << 20
MAX_DEPTH = 64  # deeper than any file the harness writes or reads by a wide margin


def fail(error: type[HarnessError], path: object, where: str, message: str) -> HarnessError:
    """Build the error for `path`: ManifestError takes (path, field, message); the others one message."""
    if issubclass(error, ManifestError):
        return error(path, where, message)
    return error(f"{path}: {where}: {message}" if where else f"{path}: {message}")


def read_bytes(
    path: str | Path, what: str, *, max_bytes: int = MAX_INPUT_BYTES, error: ErrorType = ManifestError
) -> bytes:
    """The whole file, if it is a regular file of at most max_bytes. Opening never blocks (O_NONBLOCK for FIFOs)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise fail(error, p, "(file)", f"no such {what} file") from None
    except IsADirectoryError:
        raise fail(error, p, "(file)", f"is a directory, not a {what} file") from None
    except OSError as exc:
        raise fail(error, p, "(file)", f"cannot read {what} file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise fail(error, p, "(file)", f"is a directory, not a {what} file")
        if not stat.S_ISREG(st.st_mode):
            raise fail(
                error, p, "(file)", f"not a regular file (a FIFO, device or socket); refusing to read it as {what}"
            )
        if st.st_size > max_bytes:
            raise fail(error, p, "(file)", f"{what} file is {st.st_size} bytes, over the limit of {max_bytes}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise fail(error, p, "(file)", f"{what} file grew past the limit of {max_bytes} bytes while being read")
        return data
    except OSError as exc:
        raise fail(error, p, "(file)", f"cannot read {what} file: {exc.strerror}") from None
    finally:
        os.close(fd)


def _decode(data: bytes, p: object, what: str, error: ErrorType) -> str:
    try:
        return data.decode("utf-8-sig")  # a UTF-8 BOM is not part of the content
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise fail(error, p, f"line {line}", f"{what} is not UTF-8 text (byte {exc.start})") from None


def read_text(
    path: str | Path, what: str, *, max_bytes: int = MAX_INPUT_BYTES, error: ErrorType = ManifestError
) -> str:
    return _decode(read_bytes(path, what, max_bytes=max_bytes, error=error), path, what, error)


def check_depth(obj: Any, max_depth: int = MAX_DEPTH) -> int | None:
    """The depth at which `obj` first exceeds max_depth, or None. Iterative; shared (YAML alias) nodes visited once."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > max_depth:
                return depth
            if id(node) in seen:
                continue
            seen.add(id(node))
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
    return None


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, where_path: object, what: str, *, max_depth: int = MAX_DEPTH, allow_nan: bool = False,
               error: ErrorType = DataError, where: str = "") -> Any:  # fmt: skip
    """Parse one JSON document; `where` (e.g. 'line 3') is prefixed to any message."""
    try:
        obj = json.loads(text) if allow_nan else json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise fail(error, where_path, where or "(nesting)", f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError, and so is a rejected NaN
        line = getattr(exc, "lineno", None)
        loc = where or (f"line {line}" if line else "(syntax)")
        raise fail(error, where_path, loc, f"not valid JSON: {getattr(exc, 'msg', exc)}") from None
    if check_depth(obj, max_depth) is not None:
        raise fail(error, where_path, where or "(nesting)", f"{what} is nested deeper than {max_depth} levels")
    return obj


def read_json(path: str | Path, what: str, *, max_bytes: int = MAX_DATA_BYTES, max_depth: int = MAX_DEPTH,
              allow_nan: bool = False, error: ErrorType = DataError) -> Any:  # fmt: skip
    text = read_text(path, what, max_bytes=max_bytes, error=error)
    return parse_json(text, path, what, max_depth=max_depth, allow_nan=allow_nan, error=error)


def iter_jsonl(path: str | Path, what: str, *, max_bytes: int = MAX_DATA_BYTES, max_line_bytes: int = MAX_LINE_BYTES,
               max_depth: int = MAX_DEPTH, allow_nan: bool = False, error: ErrorType = DataError,
               skip_blank: bool = True) -> Iterator[tuple[int, Any]]:  # fmt: skip
    """(line number, object) for each line. The file is read once, bounded; a bad line names its number."""
    text = read_text(path, what, max_bytes=max_bytes, error=error)
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            if skip_blank:
                continue
        if len(line) > max_line_bytes:
            raise fail(error, path, f"line {lineno}", f"line is longer than {max_line_bytes} bytes")
        yield lineno, parse_json(line, path, what, max_depth=max_depth, allow_nan=allow_nan, error=error,
                                 where=f"line {lineno}")  # fmt: skip


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                f"key {key!r} first set on line {seen[key]}", None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    mapping: dict[Any, Any] = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(
    text: str, path: object, what: str, *, max_depth: int = MAX_DEPTH, error: ErrorType = ManifestError
) -> Any:
    try:
        obj = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise fail(error, path, "(nesting)", f"{what} is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit, raised by the constructor
        raise fail(error, path, "(value)", f"not a usable YAML value: {str(exc).splitlines()[0]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(syntax)"
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        msg = f"{problem} ({context})" if context and "first set" in str(context) else problem
        raise fail(error, path, where, f"not valid YAML: {msg}") from None
    depth = check_depth(obj, max_depth)
    if depth is not None:
        raise fail(error, path, "(nesting)", f"{what} is nested deeper than {max_depth} levels")
    _reject_nonfinite(obj, path, what, error)
    return obj


def _reject_nonfinite(obj: Any, path: object, what: str, error: ErrorType) -> None:
    """YAML's .nan/.inf are never a valid count, rate or time in a harness input: name the field that holds one."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    seen: set[int] = set()
    while stack:
        node, at = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise fail(error, path, at or "(top level)", f"{node!r} is not allowed; only finite numbers are")
        if isinstance(node, (dict, list)) and id(node) not in seen:
            seen.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in items)


def read_yaml(path: str | Path, what: str, *, max_bytes: int = MAX_INPUT_BYTES, max_depth: int = MAX_DEPTH,
              error: ErrorType = ManifestError) -> Any:  # fmt: skip
    p = Path(path)
    if p.is_dir():
        raise fail(error, p, "(file)", f"is a directory, not a {what} file")
    text = read_text(p, what, max_bytes=max_bytes, error=error)
    return parse_yaml(text, p, what, max_depth=max_depth, error=error)
