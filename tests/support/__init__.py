"""Test doubles used by tests only (the product imports none of this)."""
