# Two commands for a newcomer:  `make run`  and  `make test`.
# Everything is built by CMake under build/ (build-asan/ for the sanitizer run, build-fuzz/ for
# the fuzzers). Builds are quiet: one line says what is built, the compiler's output goes to
# DIR/build.log and is printed only when the build fails (V=1 shows it as it happens).

BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# CI (which sets CI=true) treats warnings as errors.
ifneq ($(CI),)
CMAKE_ARGS += -DNB_WERROR=ON
endif
# `make fuzz`: each harness this long (seconds); `make fuzz-ci`: 60 s each.
FUZZ_SECONDS ?= 300
FUZZERS      ?= lang npy png image safetensors idx json
FUZZ_CC      ?= clang

.PHONY: all build run demo test test-asan ci fuzz fuzz-ci fuzz-build clean

all: build

# $(call quiet_build,DIR,CMAKE ARGUMENTS,BUILD ARGUMENTS,WHAT): configure and build into DIR with
# the output in DIR/build.log, printed (with the command that failed) only on failure.
ifeq ($(V),1)
define quiet_build
	cmake -S . -B $(1) $(2)
	cmake --build $(1) -j $(JOBS) $(3)
endef
else
define quiet_build
	@mkdir -p $(1)
	@echo "building $(4) in $(1)/ (log: $(1)/build.log)"
	@{ cmake -S . -B $(1) $(2) && cmake --build $(1) -j $(JOBS) $(3); } >$(1)/build.log 2>&1 || \
	  { cat $(1)/build.log; echo "make: the build failed; its output is above and in $(1)/build.log"; exit 1; }
	@n=$$(grep -c 'warning:' $(1)/build.log); [ "$$n" = 0 ] || \
	  echo "($$n compiler warning lines: see $(1)/build.log)"
endef
endif

build:
	$(call quiet_build,$(BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS),,nabla)

# The main job: fit a neural field (hash grid -> fused MLP, Adam) to a built-in procedural image,
# on the GPU when there is one (the CPU otherwise), and write the reconstruction to fit.png.
run: build
	@./$(BUILD)/nabla fit-image

# The earlier demos: devices, a round trip through every device, a kernel-language call.
demo: build
	./$(BUILD)/nabla devices
	./$(BUILD)/examples/device_roundtrip
	./$(BUILD)/nabla call examples/add.nb add "[[1,2,3],[4,5,6]]" "[10,20,30]"
	./$(BUILD)/examples/add_demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The C tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan:
	$(call quiet_build,$(BUILD_ASAN),-DCMAKE_BUILD_TYPE=Debug -DNB_SANITIZE=ON $(CMAKE_ARGS),,nabla and its tests with ASan + UBSan)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

ci: test test-asan

# libFuzzer harnesses (tests/fuzz) under ASan + UBSan, built with clang in their own tree, each run
# for FUZZ_SECONDS; any crash, sanitizer report, leak or 10 s hang fails with the reproducer's path.
# Findings and the grown corpus stay under $(BUILD_FUZZ)/fuzz-out/, never in the source tree.
fuzz-build:
	$(call quiet_build,$(BUILD_FUZZ),-DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNB_FUZZ=ON -DNB_BUILD_TESTS=OFF,--target fuzzers,the fuzzers (clang; libFuzzer + ASan + UBSan))

fuzz: fuzz-build
	@sh tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS) $(FUZZERS)

# CI's short run: 60 s per harness.
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=60

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)
