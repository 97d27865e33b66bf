# PCastKit. `make demo` and `make test` install what is missing (scripts/setup.sh) before building.
SWIFT ?= swift
# Seconds the demo runs; 0 runs until Ctrl-C.
DEMO_SECONDS ?= 15
BENCH_DIR ?= bench-results
# Runs of each benchmark in `make bench` (the article shows each figure's spread over them), and
# which benchmarks (empty: all of them; else `pcast-bench` names, e.g. BENCHMARKS="srtp fanout").
BENCH_RUNS ?= 3
BENCHMARKS ?=
BENCH_ARTICLE = Sources/PCastNode/PCastNode.docc/BenchmarkFigures.md
SOAK_MINUTES ?= 30
# The product libraries, each with a DocC catalog (`make docs`).
DOC_TARGETS = GStreamer PCastProtocol SRTP PCastMedia PCast PCastRelay PCastContracts PCastServer PCastMediaServices PCastNode
# Seconds of libFuzzer per parser in `make fuzz`.
FUZZ_SECONDS ?= 60
# Debug builds optimise C too: the pixel converter (CPixelConverter) converts real frames in the
# media tests. A compiler flag here, not in the manifest: a package with unsafe flags cannot be a
# versioned dependency.
DEBUG_FLAGS ?= -Xcc -O2
# Test groups. A suite runs apart from the main group when it is declared inside one of these
# namespaces (Tests/*/TestGroups.swift says why each exists), or when its whole test target is
# listed here; the recipe names groups, never suites. A filter is a regular expression on the test
# id, `Target.Group/Suite/test()`.
GROUPS = Prerequisites ManyClients OneAtATime Bursts Devices Leaks Cluster
CHILD_PROCESS_TARGETS = PCastCLITests
BURST_TARGETS = PCastRecordingTests PCastImpairmentTests
in_groups = $(foreach g,$(1),'\.$(g)/')
in_targets = $(foreach t,$(1),'^$(t)\.')
in_target_groups = $(foreach t,$(1),$(foreach g,$(2),'^$(t)\.$(g)/'))

# The demo: the embedded platform in-process; a test pattern and tone published through its relay
# to a subscriber (a window when there is a display, a null sink otherwise), with a status line.

.PHONY: setup build demo demo-cluster test bench fuzz docs soak inspect clean plugin install-plugin deb

setup:
	@bash scripts/setup.sh

build: setup
	$(SWIFT) build $(DEBUG_FLAGS)

demo: setup
	$(SWIFT) build -c release --product pcast
	$(SWIFT) build -c release --product gstpcast
	.build/release/pcast demo --seconds $(DEMO_SECONDS)

# A cluster on one machine: a throwaway PostgreSQL and three nodes on 127.0.0.2-4 sharing it; a
# room and chat across them, then kill -9 of one node.
demo-cluster: setup
	$(SWIFT) build -c release --product pcast
	bash scripts/cluster.sh demo

test: setup
	$(SWIFT) build --build-tests $(DEBUG_FLAGS)
	# The media the tests use is made first (ffmpeg, once per machine), alone: an encode in the
	# middle of the main group would compete with its frame-by-frame suites.
	$(SWIFT) test --skip-build --filter $(call in_groups,Prerequisites)
	# The main group: every suite in no group.
	$(SWIFT) test --skip-build $(foreach p,$(call in_groups,$(GROUPS)) $(call in_targets,$(CHILD_PROCESS_TARGETS) $(BURST_TARGETS)),--skip $(p))
	$(SWIFT) test --skip-build $(foreach p,$(call in_groups,ManyClients),--filter $(p))
	$(SWIFT) test --skip-build --no-parallel $(foreach p,$(call in_groups,OneAtATime),--filter $(p))
	# The CLI suite starts long-lived child processes (pcast serve): in a process of its own, so
	# they cannot disturb the Foundation `Process` waits of the other suites.
	$(SWIFT) test --skip-build $(foreach p,$(call in_targets,$(CHILD_PROCESS_TARGETS)),--filter $(p)) $(foreach p,$(call in_groups,$(GROUPS)),--skip $(p))
	# The recording suites spawn or run encoders flat out (ffprobe, gst-launch, x264 on non-live
	# sources); the impairment proxy tests send thousands of datagrams at once.
	$(SWIFT) test --skip-build $(foreach p,$(call in_groups,Bursts) $(call in_targets,$(BURST_TARGETS)),--filter $(p))
	$(SWIFT) test --skip-build $(foreach p,$(call in_groups,Devices),--filter $(p))
	# A real PostgreSQL (scripts/postgres.sh, stopped with the test process) and nodes sharing it,
	# one suite at a time: three nodes' relays, encoders and decoders on two cores leave no room for
	# another suite's (under that load an edge's retransmissions came too late for its viewers).
	$(SWIFT) test --skip-build --no-parallel $(foreach p,$(call in_groups,Cluster),--filter $(p)) $(foreach p,$(call in_targets,$(CHILD_PROCESS_TARGETS)),--skip $(p))
	# The same with nodes as processes (pcast serve, publish, subscribe; one killed).
	$(SWIFT) test --skip-build $(foreach p,$(call in_target_groups,$(CHILD_PROCESS_TARGETS),Cluster),--filter $(p))
	# glibc gives new threads arenas of their own (up to 8 per core) and keeps freed memory in
	# each, so RSS jumps by megabytes whenever a streaming thread lands in a fresh arena; two
	# arenas make the figure show what is kept rather than where threads landed.
	MALLOC_ARENA_MAX=2 $(SWIFT) test --skip-build --no-parallel $(foreach p,$(call in_groups,Leaks),--filter $(p))
	# The examples (Examples/*, scripts/examples.sh): the Swift ones build as another package that
	# depends on PCastKit through a tagged git URL; each runs against this build's `pcast serve`.
	bash scripts/examples.sh

# A Debian 12 package (scripts/make-deb.sh): release pcast and the GStreamer plugin, the Swift
# runtime bundled in /usr/lib/pcast, the systemd unit (deploy/systemd), /etc/pcast/pcast.json.
deb: setup
	$(SWIFT) build -c release --product pcast
	$(SWIFT) build -c release --product gstpcast
	bash scripts/make-deb.sh --binaries .build/release --output .build/deb

# The GStreamer plugin (pcastsink, pcastsrc): libgstpcast.so, loaded by any GStreamer application
# from GST_PLUGIN_PATH. It links the Swift runtime from the toolchain it was built with.
plugin: setup
	$(SWIFT) build -c release --product gstpcast
	@echo "export GST_PLUGIN_PATH=$(abspath .build/release)   # then: gst-inspect-1.0 pcast"

install-plugin: plugin
	install -D -m 644 .build/release/libgstpcast.so "$$(pkg-config --variable=pluginsdir gstreamer-1.0)/libgstpcast.so"
	@echo "installed in $$(pkg-config --variable=pluginsdir gstreamer-1.0): gst-inspect-1.0 pcast"

bench: setup
	$(SWIFT) build -c release --product pcast
	$(SWIFT) build -c release --product pcast-bench
	$(SWIFT) build -c release --product gstpcast
	# BENCH_RUNS runs of every `pcast-bench` subcommand (or of BENCHMARKS, names separated by
	# spaces), run N in $(BENCH_DIR)/run-N, each benchmark writing <name>.json and <name>.md; `all`
	# runs cycles in a child process with MALLOC_ARENA_MAX=2 (so RSS shows what is kept). Then
	# scripts/bench-article.py writes the figures article from the runs' markdown, each figure with
	# its spread over the runs: the documentation's figures are what this wrote, never copied.
	@failed=0; runs=; \
	for run in $$(seq 1 $(BENCH_RUNS)); do \
	  dir=$(BENCH_DIR)/run-$$run; rm -rf $$dir; mkdir -p $$dir; runs="$$runs $$dir"; \
	  .build/release/pcast-bench all --output $$dir $(foreach b,$(BENCHMARKS),--only $(b)) || failed=1; \
	done; \
	if [ -z "$(BENCHMARKS)" ]; then \
	  python3 scripts/bench-article.py $$runs > $(BENCH_ARTICLE) && echo "wrote $(BENCH_ARTICLE)"; \
	else \
	  python3 scripts/bench-article.py $$runs > $(BENCH_DIR)/figures.md && echo "wrote $(BENCH_DIR)/figures.md (some benchmarks only: the article keeps the last full run's)"; \
	fi; \
	exit $$failed
	# Micro-benchmarks of the hot paths (Benchmarks/, ordo-one's package-benchmark): the run is kept
	# as the baseline `latest`, written as markdown, and compared with the committed `reference`.
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark baseline update latest --no-progress
	cd Benchmarks && $(SWIFT) package benchmark baseline read latest --format markdown --no-progress > $(abspath $(BENCH_DIR))/micro-benchmarks.md
	cd Benchmarks && $(SWIFT) package benchmark baseline compare reference latest --no-progress | tee $(abspath $(BENCH_DIR))/micro-benchmarks-vs-reference.txt

# libFuzzer on every parser that takes bytes from the network or a torn file (Sources/PCastFuzzing):
# FUZZ_SECONDS each; the corpora in Tests/Corpora/fuzz grow in place (commit them), and a crash is
# saved there as crash-* for a regression test (the test suite replays every file).
fuzz: setup
	$(SWIFT) build -c release --scratch-path .build-fuzz --product pcast-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING
	$(SWIFT) build --product pcast-fuzz
	.build/debug/pcast-fuzz seed Tests/Corpora/fuzz
	bash scripts/fuzz.sh .build-fuzz/release/pcast-fuzz $(FUZZ_SECONDS)

# 30 minutes of publish/subscribe with churn; fails if memory, threads or descriptors grow (not part of test).
soak: setup
	$(SWIFT) build -c release --product pcast-bench
	$(SWIFT) build -c release --product gstpcast
	MALLOC_ARENA_MAX=2 .build/release/pcast-bench soak --minutes $(SOAK_MINUTES) --output $(BENCH_DIR)
# The DocC catalogs of the product libraries (Sources/<target>/<target>.docc), built into .build/docs.
docs: setup
	$(SWIFT) package --allow-writing-to-directory .build/docs generate-documentation --output-path .build/docs \
		$(DOC_TARGETS:%=--target %) --enable-experimental-combined-documentation
inspect: setup
	$(SWIFT) build --product pcast $(DEBUG_FLAGS)
	.build/debug/pcast inspect

clean:
	rm -rf .build $(BENCH_DIR)
