# Thin wrapper over CMake.  `make run` and `make test` install missing
# Debian packages first (scripts/install-deps.sh).
BUILD ?= build
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all build deps run test install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

deps:
	./scripts/install-deps.sh

run: deps
	$(MAKE) build
	./scripts/run-demo.sh $(BUILD)

test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)

# Hardening (issue 8): libFuzzer targets, each run FUZZ_SECONDS (clang,
# ASan + UBSan, build dir BUILD_FUZZ); integration tests under valgrind.
FUZZ_SECONDS ?= 60
BUILD_FUZZ ?= build-fuzz
BUILD_MEMCHECK ?= build-memcheck
.PHONY: fuzz memcheck
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/fuzz.sh $(BUILD_FUZZ)

memcheck:
	./scripts/memcheck.sh $(BUILD_MEMCHECK)
