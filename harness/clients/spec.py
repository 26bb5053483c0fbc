"""The clients the harness runs as judges (issue 33): each a pinned environment (a hashed lock under
manifests/locks/clients/, its own sha256 pinned here) and a driver script run with that environment's interpreter.

    spec = CLIENTS["litellm"]      # ClientSpec(name, package, version, lock, lock_sha256, driver, features, runtime)

A client's runtime says how its environment is made and its driver run: "python", a virtual environment from a
`--require-hashes` lock, the driver run with its python; "node", a node_modules from an npm lock directory
(package.json + package-lock.json with integrity hashes, installed by `npm ci`), the driver (.mjs) run with node.

A feature is what the client's users do with it, judged against the scripted model's scripts
(harness.models.scripted): `chat` one turn, `stream` the same streamed, `tools` a tool loop (call, tool result,
answer), `parallel` two tools called at once, `structured` the client's own structured output, `responses*` and
`messages*` the same through the Responses and Messages APIs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.settings import REPO_ROOT

__all__ = ["ClientSpec", "CLIENTS", "FEATURES", "LOCKS_DIR", "DRIVERS_DIR", "RUNTIMES"]

LOCKS_DIR = REPO_ROOT / "manifests" / "locks" / "clients"
DRIVERS_DIR = Path(__file__).parent / "drivers"
# runtime -> the file under the lock whose sha256 is pinned ("" : the lock is that file itself)
RUNTIMES: dict[str, str] = {"python": "", "node": "package-lock.json"}

# feature -> (the script it follows, the surface it uses): the one-line requirement of its case
FEATURES: dict[str, str] = {
    "chat": "one turn through Chat Completions answers the scripted greeting",
    "stream": "one streamed turn through Chat Completions answers the scripted greeting",
    "tools": "a tool loop through Chat Completions: get_weather called with the scripted arguments, then the answer",
    "parallel": "two tools offered: get_weather and get_time called together, then the answer",
    "structured": "the client's own structured output of a model (name: str, count: int), pydantic or zod, is parsed",
    "structured-json": "the client's JSON-schema mode (response_format) of the same pydantic model is parsed",
    "responses": "one turn through the Responses API answers the scripted greeting",
    "responses-tools": "a tool loop through the Responses API: get_weather called, then the answer",
    "messages": "one turn through the Messages API (/v1/messages) answers the scripted greeting",
    "messages-stream": "one streamed turn through the Messages API answers the scripted greeting",
    "messages-tools": "a tool loop through the Messages API (the SDK's own runner): get_weather called, then the answer",
    "messages-parallel": "two tools through the Messages API: both called, then the answer",
}


@dataclass(frozen=True)
class ClientSpec:
    name: str  # the case id's middle part: client.<name>.<feature>
    package: str  # the distribution users install
    version: str
    lock_name: str  # under LOCKS_DIR
    lock_sha256: str  # the lock file's own hash: a lock that differs is refused before anything of it is installed
    driver_name: str  # under DRIVERS_DIR
    features: tuple[str, ...]
    runtime: str = "python"  # a key of RUNTIMES

    @property
    def lock(self) -> Path:
        """The lock: a requirements file (python) or the directory of package.json and package-lock.json (node)."""
        return LOCKS_DIR / self.lock_name

    @property
    def driver(self) -> Path:
        return DRIVERS_DIR / self.driver_name

    @property
    def env_name(self) -> str:
        """The tool environment's name under $HARNESS_HOME/tools/ (harness.lockedenv adds the lock's key)."""
        return f"client-{self.name}"


_SPECS = (
    ClientSpec("openai-agents", "openai-agents", "0.24.0", "openai-agents-0.24.0.txt",
               "b37020abd6692087ba82341d9dafbe6b17e2fd83f97361bea9451928434e7da1", "agents_driver.py",
               ("chat", "stream", "tools", "parallel", "structured", "responses", "responses-tools")),
    ClientSpec("pydantic-ai", "pydantic-ai-slim[openai]", "2.78.0", "pydantic-ai-2.78.0.txt",
               "85d228be7038abd4646aff0d6093636e8a207d34e4adb2668bbb3658f2a1565a", "pydantic_ai_driver.py",
               ("chat", "stream", "tools", "parallel", "structured")),
    ClientSpec("instructor", "instructor", "1.17.0", "instructor-1.17.0.txt",
               "5062dcb14457b16ac36eff166231f5cce740d7bb4c0cf277884dd454192e4d4b", "instructor_driver.py",
               ("structured", "structured-json")),
    ClientSpec("litellm", "litellm", "1.110.2", "litellm-1.110.2.txt",
               "becb33e1509d6af5ace369a03bccc2c51a46772948ae7d87e6d593b096218bc2", "litellm_driver.py",
               ("chat", "stream", "tools", "parallel", "structured")),
    ClientSpec("anthropic", "anthropic", "2.17.0", "anthropic-2.17.0.txt",
               "00c730d38ad5f78f7842c7d719f7d9ee1de96f3d9dee0b21c1cf50669cf2d571", "anthropic_driver.py",
               ("messages", "messages-stream", "messages-tools", "messages-parallel")),
    ClientSpec("vercel-ai", "ai", "6.0.333", "vercel-ai-6.0.333",
               "d9ce22569abb6bbd78354bc2fe7a690d44578b1ad8a973ad33958b601f20f6b7", "vercel_ai_driver.mjs",
               ("chat", "stream", "tools", "parallel", "structured", "responses", "responses-tools", "messages",
                "messages-stream", "messages-tools"), runtime="node"),
)  # fmt: skip
CLIENTS: dict[str, ClientSpec] = {s.name: s for s in _SPECS}
