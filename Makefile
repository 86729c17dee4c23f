# The map of the fork. Two commands on a fresh machine: `make bench` (the main job) and `make test`; both install first.
#
#   make install    .venv with the fork installed editable, torch==2.13.0 (CPU) and the dev tools
#   make test       installs when needed, runs `make check`, then every test (pytest -n 2)
#   make test-compile   only the tests marked `compile`
#   make bench      the main job: the fork against pristine upstream side by side (table, JSON, plot; utils/bench/README.md)
#   make bench-quick    `make bench`, smaller (BENCH_ARGS adds options, e.g. BENCH_ARGS="--device cuda")
#   make bench-long     `make bench` plus a cold compile in every run, the 16-layer model, tracing, masks, the
#                       consecutive calls and the first calls (much longer)
#   make bench-guards   what dynamo's guard evaluation costs per token, pristine beside the fork (a few minutes)
#   make bench-gpu      the decoding step on a GPU, pristine beside the fork: time per token, CUDA-graph recordings
#                       and replays, syncs per step (GPU_ARGS="--device cpu" runs it without device calls)
#   make bench-publish  the latest full bench-out/ run into docs/ and the README's generated figures (RUN=<folder> for another)
#   make oracle     every causal-LM architecture as a tiny model, pristine vs the fork, tokens and scores compared
#                   exactly, the sliding window families compiled past their window, and the case families
#                   (utils/oracle/README.md; about 11 minutes on 2 cores;
#                   ORACLE_ARGS="--only gpt2,llama" for some)
#
# Patch queue (the work tree .fork/ is a git repository: `upstream` tag, then one commit per patch):
#   make fork       build .fork/ from the pinned sdist + patches/ and link src/transformers, tests into it
#   make patches    regenerate patches/ from the commits in .fork/ (byte-stable)
#   make check      patches apply (in order, and each alone or on its Depends-on patches), .fork/ == pristine +
#                   patches, ruff (upstream's settings) on touched files
#   make rebase UPSTREAM=x.y.z [SHA256=...]   rebase the series onto another release in .fork-rebase/x.y.z/
#                   (three-way merges), one line per patch; stops at a conflict (FORCE=1 starts again)
#   make rebase-continue UPSTREAM=x.y.z   after resolving a conflict there: go on
#   make rebase-finish UPSTREAM=x.y.z     once all patches are on it: export patches/, pin patches/UPSTREAM
#   make upstream-outlook [UPSTREAM=x.y.z]   how the series stands against the newest release (changes nothing)
#   make bisect     after patches 1..k, the tests of patches 1..k pass (each k, in a scratch tree; FROM=25 starts at
#                   k = 25, the earlier prefixes unchanged since they last passed)
#   make standalone each patch applies with `git am -3` to pristine alone, or on the patches its `Depends-on:`
#                   trailers name, and its own tests pass there (ONLY=0005 for one patch; BEFORE=1 also runs them
#                   without the patch's source change and writes what fails there to standalone-out/)
#   make quality / make style   ruff check / ruff fix+format on touched files and the tooling

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
FORK := PYTHONPATH=utils $(PYTHON) -m forktool
PYTEST_ARGS ?= -n 2

.PHONY: install fork patches check rebase rebase-continue rebase-finish upstream-outlook bisect standalone test test-compile bench bench-long bench-quick bench-host-ab bench-guards bench-gpu bench-publish oracle quality style clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py pyproject.toml requirements-dev.txt patches/UPSTREAM patches/series $(wildcard patches/*.patch)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -e ".[torch]"
	touch $@

fork:
	$(FORK).materialize $(if $(FORCE),--force)

patches:
	$(FORK).export

check: install
	$(FORK).check

rebase:
	@test -n "$(UPSTREAM)" || { echo "usage: make rebase UPSTREAM=x.y.z [SHA256=...] [FORCE=1]"; exit 2; }
	$(FORK).rebase $(UPSTREAM) $(if $(SHA256),--sha256 $(SHA256)) $(if $(FORCE),--force)

rebase-continue:
	@test -n "$(UPSTREAM)" || { echo "usage: make rebase-continue UPSTREAM=x.y.z"; exit 2; }
	$(FORK).rebase $(UPSTREAM) --continue

rebase-finish:
	@test -n "$(UPSTREAM)" || { echo "usage: make rebase-finish UPSTREAM=x.y.z"; exit 2; }
	$(FORK).rebase $(UPSTREAM) --finish

upstream-outlook:
	$(FORK).outlook $(if $(UPSTREAM),--version $(UPSTREAM))

bisect: install
	PYTHONPATH=utils $(VPY) -m forktool.bisect $(if $(FROM),--from $(FROM)) -- $(PYTEST_ARGS)

standalone: install
	PYTHONPATH=utils $(VPY) -m forktool.standalone --tests $(if $(ONLY),--only $(ONLY)) \
		$(if $(BEFORE),--before --report standalone-out) -- $(PYTEST_ARGS)

# pytest's own exit status is the result: 5 (nothing collected) fails like any other non-zero status.
test: install
	$(MAKE) --no-print-directory check
	$(VPY) -m pytest $(PYTEST_ARGS)

test-compile: install
	$(VPY) -m pytest $(PYTEST_ARGS) -m compile

bench: install
	@PYTHONPATH=utils $(VPY) -m bench $(BENCH_ARGS)

bench-long: install
	@PYTHONPATH=utils $(VPY) -m bench --long $(BENCH_ARGS)

bench-quick: install
	@PYTHONPATH=utils $(VPY) -m bench --quick $(BENCH_ARGS)

bench-host-ab: install
	@test -n "$(AFTER)" || { echo "usage: make bench-host-ab AFTER=15,16,17 (patch counts; 0 is pristine)"; exit 2; }
	PYTHONPATH=utils $(VPY) -m bench.host_ab --after $(AFTER) $(HOST_AB_ARGS)

bench-guards: install
	PYTHONPATH=utils $(VPY) -m bench.guards $(GUARDS_ARGS)

bench-gpu: install
	PYTHONPATH=utils $(VPY) -m bench.gpu_check $(GPU_ARGS)

bench-publish: install
	PYTHONPATH=utils $(VPY) -m bench.publish $(RUN)

oracle: install
	PYTHONPATH=utils $(VPY) -m oracle $(ORACLE_ARGS)

TOUCHED = $(shell git -C .fork diff --name-only --diff-filter=d upstream HEAD -- '*.py' 2>/dev/null)

quality: install
	$(VENV)/bin/ruff check --no-cache setup.py conftest.py utils $(TOUCHED)
	$(VENV)/bin/ruff format --no-cache --check setup.py conftest.py utils $(TOUCHED)

style: install
	$(VENV)/bin/ruff check --no-cache --fix setup.py conftest.py utils $(TOUCHED)
	$(VENV)/bin/ruff format --no-cache setup.py conftest.py utils $(TOUCHED)

clean:
	rm -rf .fork .fork.new .fork.old .fork-rebase .bench src tests build $(VENV) .pytest_cache .hypothesis
