"""HTTP/1.1 connection handling that pooled clients (httpx, the OpenAI SDK) rely on."""

from __future__ import annotations

from harness.client import record
from harness.conformance.model import Check, Level, failed, passed, skipped
from harness.conformance.registry import case

ATTEMPTS = 16  # the close races the next request: seen on 1 to 5 of 6 reuses, so a few reuses cannot tell


@case(
    "http.keepalive-after-stream",
    "a kept-alive connection stays usable after a streamed response, unless the server sent Connection: close",
    Level.SHOULD,
)
async def keepalive_after_stream(ctx) -> Check:
    client = ctx.new_client(api_key=ctx.api_key)  # one connection in its pool: each request reuses the stream's
    closed: list[str] = []
    try:
        for _ in range(ATTEMPTS):
            stream = await record(client, "POST", "/v1/chat/completions", json=ctx.chat(stream=True, max_tokens=4),
                                  **ctx.limits)  # fmt: skip
            if stream.status != 200:
                return skipped(f"the stream was refused (HTTP {stream.status}); see the stream cases")
            if stream.headers.get("connection", "").lower() == "close":
                return passed("the server said Connection: close after the stream")
            after = await record(client, "GET", "/health", **ctx.limits)
            if after.status is None:
                closed.append(str(after.error))
    finally:
        await client.aclose()
    return judge_keepalive(closed, ATTEMPTS)


def judge_keepalive(closed_errors: list[str], attempts: int) -> Check:
    """The requests after a stream that got no answer, out of `attempts`: none is a pass; every one dropped by a close
    ("without sending a response", httpx's RemoteProtocolError) is `closed-after-stream`, anything else
    `no-answer-after-stream`."""
    if closed_errors:
        tag = (
            "closed-after-stream"
            if all("without sending a response" in e for e in closed_errors)
            else "no-answer-after-stream"
        )
        return failed(
            tag,
            "the next request on the connection is answered",
            f"{len(closed_errors)} of {attempts} requests after a stream failed: {closed_errors[0]}",
            note="the server closed the connection after a streamed response without Connection: close; a pooled "
            "client's next request on it fails (clients that retry connection errors hide it)",
        )
    return passed(f"{attempts} requests after a stream on the same connection answered")
