# The two set-up commands a new user needs (see README): `make run` and `make test`.
VENV := .venv

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

.PHONY: run test check
run: $(VENV)/.installed
	$(VENV)/bin/harness run

# Quality gates, part of `make test`: lint and format check over the repo, types over harness/ (config in pyproject.toml).
check: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: check
	bash scripts/system-deps.sh
	bash scripts/run-tests.sh $(PYTEST_ARGS)
