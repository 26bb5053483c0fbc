"""`harness upgrade`: is engine version NEW a safe replacement for OLD?

collect.py launches each side once (from a loaded Manifest) and gathers recordings, metrics and conformance verdicts;
compare.py compares them area by area; judge.py turns the comparison into a verdict (one rule per area); render.py
writes upgrade.md from the report; run.py ties them together; cli.py is the command; model.py names the shapes.
"""
