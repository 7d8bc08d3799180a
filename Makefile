# Everything a fresh Debian 12 machine (as root) needs is installed by these targets.
#   make test   - every test, in stages (scripts/ci-stages; CI runs this too): lint + unit,
#                 ansible-runner, ansible-runner on the lowest ansible-core claimed, then set
#                 up the host and run the lab and Molecule tests; a failing stage stops it
#   make test-unit - only the first stage (lint + unit tests; no host set-up, ~2 min)
#   make test STAGES="unit ansible" - only those stages
#   make demo   - set up, start 3 lab hosts and run the main job against them
VENV ?= .venv
PY := $(VENV)/bin/python
HOSTS ?= 3

.PHONY: host venv test test-unit test-extended demo lab-down clean

host:
	scripts/setup-dev-host

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,lab]'
	touch $@

venv: $(VENV)/.installed

test:
	VENV=$(VENV) scripts/ci-stages $(STAGES)

test-unit:
	scripts/ci-stages unit

# The lab tests a CI run leaves out for time (marked `extended`; scripts/ci-stages).
test-extended:
	VENV=$(VENV) scripts/ci-stages extended

demo: host venv
	$(VENV)/bin/provision lab up --hosts $(HOSTS)
	$(VENV)/bin/provision up --profile debian12-lab lab/hosts.ini

lab-down: venv
	$(VENV)/bin/provision lab down

clean: lab-down
	rm -rf $(VENV) .cache/venv-unit .cache/venv-floor provision-runs
