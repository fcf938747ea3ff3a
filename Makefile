# The two set-up commands of the README. Both install what is missing (Debian packages),
# configure and build; `demo` runs the main job on a local directory, `test` runs ctest.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=Release
# Extra ctest arguments, e.g. --output-junit FILE (.ci/run checks the skips in it).
CTEST_ARGS ?=

.PHONY: all deps configure build demo test bench clean

all: build

deps:
	@./scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/bench/umap-demo --dir $${UMAP_DEMO_DIR:-/var/tmp/umap-demo}

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 $(CTEST_ARGS)

bench: build
	./bench/run-standard.sh $(BUILD)

clean:
	rm -rf $(BUILD)
