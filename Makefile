# PCastKit. `make demo` and `make test` install what is missing (scripts/setup.sh) before building.
SWIFT ?= swift
# Seconds the demo runs; 0 runs until Ctrl-C.
DEMO_SECONDS ?= 15
BENCH_DIR ?= bench-results
SOAK_MINUTES ?= 30
# Seconds of libFuzzer per parser in `make fuzz`.
FUZZ_SECONDS ?= 60
# Debug builds optimise C too: the pixel converter (CPixelConverter) converts real frames in the
# media tests. A compiler flag here, not in the manifest: a package with unsafe flags cannot be a
# versioned dependency.
DEBUG_FLAGS ?= -Xcc -O2
# Suites with many concurrent clients (run apart from the media suites; see `test`).
ROOM_SUITES = RoomTests ChatTests RestartTests ObservableTests RoomStoreTests RoomRegistryTests FastConverterTests PCastServerTests.SecurityTests
# Suites that publish, ingest and render through the platform with many clients: one test at a time.
EXPRESS_SUITES = PCastTests.SourcePublishTests PCastTests.IngestSecurityTests PCastTests.ExpressTests PCastTests.RoomChannelExpressTests PCastTests.IngestTests PCastTests.RecordingTests PCastTests.NetworkQualityTests PCastTests.ReconnectionTests PCastTests.ViewerBandwidthLimitTests

# The demo: the embedded platform in-process; a test pattern and tone published through its relay
# to a subscriber (a window when there is a display, a null sink otherwise), with a status line.

.PHONY: setup build demo test bench fuzz soak inspect clean

setup:
	@bash scripts/setup.sh

build: setup
	$(SWIFT) build $(DEBUG_FLAGS)

demo: setup
	$(SWIFT) build -c release --product pcast
	.build/release/pcast demo --seconds $(DEMO_SECONDS)

# Two suites run in processes of their own: the leak suite, so other tests' threads and memory don't
# blur its figures, and the real-device stand-ins, which point this process's PulseAudio client at a
# private server (an environment change other tests' device probing must not race).
test: setup
	$(SWIFT) build --build-tests $(DEBUG_FLAGS)
	# The media the tests use is made first (ffmpeg, once per machine), alone: an encode in the
	# middle of the main group would compete with its frame-by-frame suites.
	$(SWIFT) test --skip-build --filter TestMediaTests
	$(SWIFT) test --skip-build --skip TestMediaTests --skip LeakTests --skip 'RelayControlTests/noLeaks' --skip RealDeviceStandInTests --skip PCastCLITests --skip PCastRecordingTests --skip MediaRecorderTests --skip PCastImpairmentTests --skip ConsumerChurnTests $(ROOM_SUITES:%=--skip %) $(EXPRESS_SUITES:%=--skip %)
	# Rooms, chat, Express, ingest and the CPU-heavy suites (observables, the room store, the pixel
	# converter comparisons): many clients
	# and threads at once; in a process of their own so
	# their load does not starve the strict frame-by-frame media suites.
	$(SWIFT) test --skip-build $(ROOM_SUITES:%=--filter %)
	$(SWIFT) test --skip-build --no-parallel $(EXPRESS_SUITES:%=--filter %)
	# The CLI suite starts long-lived child processes (pcast serve): in a process of its own, so
	# they cannot disturb the Foundation `Process` waits of the other suites.
	$(SWIFT) test --skip-build --filter PCastCLITests
	# CPU and network bursts, apart from the realtime media suites: the recording suites spawn or
	# run encoders flat out (ffprobe, gst-launch, x264 on non-live sources); the impairment proxy
	# tests send thousands of datagrams at once.
	$(SWIFT) test --skip-build --filter PCastRecordingTests --filter MediaRecorderTests --filter PCastImpairmentTests --filter ConsumerChurnTests
	$(SWIFT) test --skip-build --filter RealDeviceStandInTests
	# Descriptor and thread counts are per process: the relay's leak check runs here too. glibc
	# gives new threads arenas of their own (up to 8 per core) and keeps freed memory in each, so
	# RSS jumps by megabytes whenever a streaming thread lands in a fresh arena; two arenas make
	# the figure show what is kept rather than where threads landed.
	MALLOC_ARENA_MAX=2 $(SWIFT) test --skip-build --no-parallel --filter LeakTests --filter 'RelayControlTests/noLeaks'
	# Another package depends on PCastKit through a tagged git URL, builds, and publishes a test
	# pattern through this build's `pcast serve`.
	bash scripts/example.sh

bench: setup
	$(SWIFT) build -c release --product pcast
	.build/release/pcast bench --output $(BENCH_DIR)
	MALLOC_ARENA_MAX=2 .build/release/pcast bench --cycles-only --output $(BENCH_DIR)
	.build/release/pcast bench --connections-only --output $(BENCH_DIR)
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
	$(SWIFT) build -c release --product pcast
	MALLOC_ARENA_MAX=2 .build/release/pcast soak --minutes $(SOAK_MINUTES) --output $(BENCH_DIR)
inspect: setup
	$(SWIFT) build --product pcast $(DEBUG_FLAGS)
	.build/debug/pcast inspect

clean:
	rm -rf .build $(BENCH_DIR)
