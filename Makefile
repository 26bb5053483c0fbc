# The two set-up commands a new user needs (see README): `make run` and `make test`.
VENV := .venv

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

.PHONY: run test
run: $(VENV)/.installed
	$(VENV)/bin/harness run

test: $(VENV)/.installed
	bash scripts/system-deps.sh
	$(VENV)/bin/pytest $(PYTEST_ARGS)
