# Thin wrapper over CMake.  `make run` and `make test` install missing
# Debian packages first (scripts/install-deps.sh).
BUILD ?= build
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all build deps run test install clean mutate mutate-diff charts

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B "$(BUILD)" $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build "$(BUILD)" -j $(JOBS)

deps:
	./scripts/install-deps.sh

# Only what the demo runs (the CMake target demo), not the tests.
run: deps $(BUILD)/CMakeCache.txt
	cmake --build "$(BUILD)" -j $(JOBS) --target demo
	./scripts/run-demo.sh "$(BUILD)"

test: deps
	$(MAKE) --no-print-directory build
	cd "$(BUILD)" && ctest --output-on-failure; rc=$$?; \
	  "$(CURDIR)/scripts/test-summary.sh" . || true; exit $$rc

install: build
	cmake --install "$(BUILD)" --prefix "$(PREFIX)"

clean:
	rm -rf "$(BUILD)"

# docs/bench-tcp-shm.svg and bench/results/*.json from the bench/ scripts
charts: build
	./bench/charts.sh $(BUILD)

# Hardening: libFuzzer targets, each run FUZZ_SECONDS (clang,
# ASan + UBSan, build dir BUILD_FUZZ); integration tests under valgrind.
FUZZ_SECONDS ?= 60
BUILD_FUZZ ?= build-fuzz
BUILD_MEMCHECK ?= build-memcheck
.PHONY: fuzz memcheck
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/fuzz.sh "$(BUILD_FUZZ)"

memcheck:
	./scripts/memcheck.sh "$(BUILD_MEMCHECK)"

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan.  Criterion runs each test in a child process whose exit code
# (where LeakSanitizer reports) it ignores, so every sanitizer report is
# written to build-asan/asan-logs/ and any report there fails the run.
# ASAN_EXCLUDE (printed) names what cannot run under ASan: the Soft-RoCE VM
# suite (its own kernel and guest binaries) and the install test (it builds
# an uninstrumented program against the instrumented library).
ASAN_EXCLUDE ?= rdma_vm|test_install
.PHONY: test-asan
test-asan: deps
	$(MAKE) build BUILD=build-asan CMAKE_FLAGS="-DTERN_WERROR=ON -DTERN_SANITIZE=ON"
	@echo "test-asan: not run under ASan (ASAN_EXCLUDE): $(ASAN_EXCLUDE)"
	rm -rf build-asan/asan-logs && mkdir -p build-asan/asan-logs
	cd build-asan && \
	  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:log_path=$(CURDIR)/build-asan/asan-logs/asan" \
	  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$(CURDIR)/build-asan/asan-logs/ubsan" \
	  ctest --output-on-failure -E '$(ASAN_EXCLUDE)'; rc=$$?; \
	  "$(CURDIR)/scripts/test-summary.sh" . || true; \
	  n=$$(ls asan-logs | wc -l); \
	  if [ $$n -ne 0 ]; then echo "test-asan: $$n sanitizer report(s):"; \
	    for f in asan-logs/*; do echo "== $$f"; head -60 "$$f"; done; fi; \
	  [ $$rc -eq 0 ] && [ $$n -eq 0 ]

# Mutation check (scripts/mutate.sh): each named mutation of the code is
# applied to a scratch copy (build-mutate/), rebuilt incrementally, and the
# test that should catch it is run; exits non-zero unless every mutation is
# caught.  MUTATE_SET=quick runs the short subset.
MUTATE_SET ?= all
mutate:
	MUTATE_SET=$(MUTATE_SET) JOBS=$(JOBS) ./scripts/mutate.sh

# Mutants of a change (docs/testing.md): every line `git diff BASE` adds or
# modifies in the C sources, mutated, each mutant against the tests
# scripts/mutate-map.txt names for its file, in MUTATE_BUDGET_S (900 s).
.PHONY: mutate-diff
mutate-diff:
	@test -n "$(BASE)" || { echo "usage: make mutate-diff BASE=<commit>" >&2; exit 2; }
	JOBS=$(JOBS) ./scripts/mutate.sh --diff "$(BASE)"
