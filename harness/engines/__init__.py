"""Engine profiles: one per engine kind, holding everything that differs between engines (see profile.py).

from harness.engines import profile_for, kinds
p = profile_for("vllm"); p.metrics.ttft, p.identity.path, p.server_args(...)
"""

from __future__ import annotations

from harness.engines.llamacpp import LLAMACPP
from harness.engines.profile import EngineProfile, EnvAddition, Identity, IdentityProblem, MetricNames
from harness.engines.tgi import TGI
from harness.engines.vllm import VLLM

__all__ = [
    "EngineProfile",
    "EnvAddition",
    "Identity",
    "IdentityProblem",
    "MetricNames",
    "PROFILES",
    "DEFAULT_KIND",
    "kinds",
    "profile_for",
    "all_metric_prefixes",
    "harmless_env",
]

PROFILES: dict[str, EngineProfile] = {p.kind: p for p in (VLLM, TGI, LLAMACPP)}
# the profile a command uses when nothing names the engine (`load --url` without --engine, `blocks crosscheck`)
DEFAULT_KIND = VLLM.kind


def kinds() -> list[str]:
    return list(PROFILES)


def profile_for(kind: str) -> EngineProfile:
    try:
        return PROFILES[kind]
    except KeyError:
        raise KeyError(f"unknown engine kind {kind!r} (known: {', '.join(PROFILES)})") from None


def all_metric_prefixes() -> tuple[str, ...]:
    return tuple(p.metrics.prefix for p in PROFILES.values())


def harmless_env() -> frozenset[str]:
    out: set[str] = set()
    for p in PROFILES.values():
        out |= p.harmless_env
    return frozenset(out)
