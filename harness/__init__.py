"""harness: pin, launch, check and compare LLM inference engines before an upgrade."""

__version__ = "0.1.0"
