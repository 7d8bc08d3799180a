# Everything a fresh Debian 12 machine (as root) needs is installed by these targets.
#   make test   - set up, then run every test (unit, ansible-runner, lab hosts, Molecule)
#   make demo   - set up, start 3 lab hosts and run the main job against them
VENV ?= .venv
PY := $(VENV)/bin/python
HOSTS ?= 3

.PHONY: host venv test demo lab-down clean

host:
	scripts/setup-dev-host

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,lab]'
	touch $@

venv: $(VENV)/.installed

test: host venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest

demo: host venv
	$(VENV)/bin/provision lab up --hosts $(HOSTS)
	$(VENV)/bin/provision up --profile debian12-lab lab/hosts.ini

lab-down: venv
	$(VENV)/bin/provision lab down

clean: lab-down
	rm -rf $(VENV) provision-runs
