# Two commands for a newcomer:  `make run`  and  `make test`.
# Everything is built by CMake under build/ (build-asan/ for the sanitizer run).

BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# CI (which sets CI=true) treats warnings as errors.
ifneq ($(CI),)
CMAKE_ARGS += -DNB_WERROR=ON
endif

.PHONY: all build run demo test test-asan ci clean

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: fit a neural field (hash grid -> fused MLP, Adam) to a built-in procedural image,
# on the GPU when there is one (the CPU otherwise), and write the reconstruction to fit.png.
run: build
	./$(BUILD)/nabla fit-image

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
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DNB_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

ci: test test-asan

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
