# vllm-fleet: make setup | lab-up | lab | lab-down | test | lint | bench
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
LAB_HOSTS ?= 2
# Gateway hosts beside them (group gateways): the fleet's front door, roles/vllm_gateway.
LAB_GATEWAYS ?= 1
LAB_DISTRO ?= debian12
# The lab's file server (tools/lab) serves this directory to lab hosts; the lab inventory points there.
LAB_WWW := /var/lib/vllm-fleet-lab/www
# Molecule scenarios in two lanes that run at once, each in order (tools/molecule_lanes.py). Those that serve vLLM
# are CPU-bound on the lab's 2 cores. default (the main job on three GPU hosts and the gateway in front of them, and
# the rollouts under load through it) is the longest and is lane 1 alone; it builds the wheelhouse, packs the release
# and publishes the compile-cache bundles the others start from. Lane 2 runs at MOLECULE_NICE, on the cores default
# leaves idle: first the scenarios that serve no vLLM, then vllm_scenes (one host: the release default has packed,
# the tiny model, scenes that start from default's bundles), nvidia_driver (no vLLM) and vllm_monitoring (a GPU host
# and a gateway that monitors it, from the same bundles, then the tuner).
# Measured on a fresh clone (docs/benchmarks.md, f006858): lane 1 2,718 s, lane 2 2,685 s.
# Each scenario is in exactly one lane (a test checks).
MOLECULE_LANES ?= default node_exporter,vllm_model,vllm_drift,vllm_scenes,nvidia_driver,vllm_monitoring
MOLECULE_NICE ?= 10
# The commit whose gateway and ingress `make bench` measures beside the checkout's (benchmarks/gateway_latency.py).
LATENCY_BEFORE ?= HEAD~1
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
# The lab's public vault password, for the lab's targets only: ansible.cfg names no vault identity, so a fleet's
# secrets are never encrypted with this one by mistake (preflight refuses them outside the lab).
export ANSIBLE_VAULT_IDENTITY_LIST := lab@$(abspath plugins/plugin_utils/lab-vault-password)

.PHONY: setup lab-up lab-down lab-model lab test checks lint syntax unit sanity molecule bench clean

$(BIN)/ansible-playbook: requirements.txt
	tools/install-host-packages
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

# The venv's Python imports the kit's shared code as Ansible does, by its collection name
# (ansible_collections.vllm.fleet.plugins.plugin_utils): the checkout is the collection vllm.fleet through the link in
# .ansible/collections, which this puts on the venv's path.
$(VENV)/.collection-on-path: $(BIN)/ansible-playbook
	echo "$(abspath .ansible/collections)" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/vllm_fleet_collection.pth"
	touch $@

setup: $(BIN)/ansible-playbook $(VENV)/.collection-on-path  ## host packages (apt) and the controller venv

lab-up: setup  ## start LAB_HOSTS lab hosts and LAB_GATEWAYS gateways (roots are built once and cached)
	rm -rf .cache/ansible-facts
	tools/lab up --hosts $(LAB_HOSTS) --gateways $(LAB_GATEWAYS) --distro $(LAB_DISTRO)

lab-down:  ## stop every host of the lab and remove its network
	tools/lab down

lab-model: setup  ## the tiny AWQ checkpoint the lab serves (regenerated only when the generator changes it)
	$(BIN)/python tools/make_tiny_awq.py --out $(LAB_WWW)/models/tiny-qwen2-awq

lab: lab-up lab-model  ## the main job on the lab: GPU-role hosts and the gateway in front of them
	ansible-playbook site.yml -i inventory/lab

lint: setup
	yamllint --strict .
	ansible-lint
	ruff check .

syntax: setup  # one ansible-playbook parses every playbook and fails on the first bad one
	ansible-playbook --syntax-check -i inventory/lab site.yml playbooks/*.yml

unit: setup  # pytest exits 5 when it collects nothing, which fails the target
	pytest -q tests

# ansible-test sanity (validate-modules, import, compile, pylint, pep8, yamllint, ...) on the kit assembled as a
# collection in a temporary tree, no test ignored; ansible-test keeps each test's pinned tools in ~/.ansible/test/venv.
sanity: setup
	$(BIN)/python tools/sanity.py

molecule: setup lab-model  ## every scenario, in MOLECULE_LANES; they use the lab's file server, wheelhouse and tiny model
	$(BIN)/python tools/molecule_lanes.py --nice $(MOLECULE_NICE) $(MOLECULE_LANES)

checks: setup  # lint, syntax, unit and sanity tests, one after another
	$(MAKE) --no-print-directory lint && $(MAKE) --no-print-directory syntax && $(MAKE) --no-print-directory unit \
		&& $(MAKE) --no-print-directory sanity

# The checks run beside the molecule lanes: the lanes' first minutes (lab roots, apt, the wheelhouse download) wait on
# the network, not the cores. Each part's output comes whole when it ends; make fails if either fails.
test: setup lab-model  ## everything CI runs
	$(MAKE) --no-print-directory -j2 --output-sync=target checks molecule

bench: setup lab-model  ## timings (medians over several runs), see docs/benchmarks.md
	$(BIN)/python benchmarks/lab_bench.py
	$(BIN)/python benchmarks/main_job_bench.py
	$(BIN)/python benchmarks/rollout_bench.py
	$(BIN)/python benchmarks/check_bench.py
	$(BIN)/python benchmarks/gateway_bench.py
	$(BIN)/python benchmarks/monitoring_bench.py
	$(BIN)/python benchmarks/tune_bench.py
	$(BIN)/python benchmarks/gateway_latency.py --before $(LATENCY_BEFORE)

clean: lab-down
	rm -rf .cache
