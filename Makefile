# Two commands matter: `make run` and `make test`. Both bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PORT ?= 8000
export PATH := $(BIN):$(PATH)

.PHONY: run test lint install

$(STAMP): pyproject.toml bridge/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ./bridge -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Embedded PostgreSQL + Redis unless DATABASE_URL / REDIS_URL are set; migrations; demo data;
# then the web process, the job worker and the two demo agents' bridges (Procfile). Ctrl-C stops everything.
run: $(STAMP)
	AGNTCHAT_URL=http://127.0.0.1:$(PORT) AGNTCHAT_AGENT_KEY_FILE=$${AGNTCHAT_VAR_DIR:-var}/demo_agent_key \
	AGNTCHAT_WORKDIR=$${AGNTCHAT_VAR_DIR:-var}/agents $(BIN)/python -m agntchat.core.embedded sh -c '\
	  python manage.py migrate --noinput && \
	  python manage.py seed_demo --url http://127.0.0.1:$(PORT) && \
	  exec honcho start --no-colour -p $(PORT) web worker demo-bridge demo-bridge-nova'

# The whole suite on PostgreSQL and real Redis: embedded ones of this run only when
# DATABASE_URL / REDIS_URL are unset (var/test-<pid>, removed after; a running `make run` is
# left alone). Tests that need what pip cannot install (Chromium, the claude and codex CLIs)
# are skipped without it; -rs lists each skip with what to install. TEST_WORKERS pytest-xdist workers, each with its own test database and Redis
# prefix; two by default, one per core here: each worker also drives servers, bridges and a
# browser, and shares the one PostgreSQL, so more workers than cores only queue (0: serial).
# Whole modules go to one worker, so a module's fixtures are built once.
# The quick loop without the browser and multi-process tests: make test ARGS='-m "not slow"'.
TEST_WORKERS ?= 2
test: $(STAMP)
	REDIS_PREFIX=agntchat-test-$$$$ $(BIN)/python -m agntchat.core.embedded --scratch \
	  python -m pytest -rs -n $(TEST_WORKERS) --dist loadscope $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/lint-imports
