"""The values an upgrade report may show of `server.env`: the generic harmless variables and every engine profile's
`harmless_env` (harness/engines/), nothing else; a secret-looking name is hashed even when listed."""

from __future__ import annotations

from harness.engines import PROFILES
from harness.secrets import _SECRET_NAME, GENERIC_HARMLESS_ENV, HARMLESS_ENV, shown_env_value


def test_harmless_names_are_the_generic_ones_and_every_profiles():
    assert HARMLESS_ENV == GENERIC_HARMLESS_ENV.union(*(p.harmless_env for p in PROFILES.values()))
    assert {"OMP_NUM_THREADS", "PYTHONHASHSEED"} <= HARMLESS_ENV
    for p in PROFILES.values():
        for name in p.harmless_env:
            # a name that looks like a secret stays hashed even when listed (TGI's MAX_INPUT_TOKENS: "TOKEN")
            expected = "4" if not _SECRET_NAME.search(name) else shown_env_value("NOT_LISTED", "4")
            assert shown_env_value(name, "4") == expected, (p.kind, name)


def test_anything_else_is_hashed():
    assert shown_env_value("HF_TOKEN", "hf_x").startswith("sha256:")
    for p in PROFILES.values():  # the variable an engine reads its API key from is never harmless
        assert shown_env_value(p.api_key_env, "k").startswith("sha256:")
