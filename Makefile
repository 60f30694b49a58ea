# isagen — `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
STAMP  := .venv-stamp

.PHONY: demo test install deps bench clean

# Python packages (and Debian's LLVM 19 and 22 where apt is available: llvm-objdump/llvm-mc, the
# gfx942 (19) and gfx950 (22) references of the decoder tests)
deps: $(STAMP)
$(STAMP): pyproject.toml
	@missing=""; command -v llvm-mc-19 >/dev/null 2>&1 || missing="llvm-19 lld-19 clang-19"; \
	command -v llvm-mc-22 >/dev/null 2>&1 || missing="$$missing llvm-22 lld-22 clang-22"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: install $$missing (apt) for the LLVM cross-checks and the HTML report test"; fi; fi
	$(PYTHON) -m pip install -q -e '.[test]'
	@touch $(STAMP)

install: deps

# generate a real kernel, assemble it, run it on the default backend (the emulator without an AMD GPU), check it against torch
demo: deps
	$(PYTHON) -m isagen demo

# lint (ruff: pyflakes, import order, bugbear, pyupgrade) and type-check (mypy: pyproject.toml) first
test: deps
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest -q

bench: deps
	$(PYTHON) bench/gen_speed.py

clean:
	rm -rf build out $(STAMP) .pytest_cache .mypy_cache .ruff_cache
