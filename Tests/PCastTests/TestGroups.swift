// Test groups: a suite declared inside one of these namespaces runs in that group's own test
// process (the Makefile's `test` target names groups, never suites); every other suite runs in the
// main group. The same names are declared in each test target that has such suites.

/// Many concurrent clients and threads, or CPU-heavy comparisons: in a process of their own so their load does not starve the frame-by-frame media suites of the main group.
enum ManyClients {}

/// Realtime figures a loaded machine would blur (no frame missing, bitrate within a band), through a pipeline or a whole platform with several clients: one test at a time.
enum OneAtATime {}

/// CPU and network bursts (encoders run flat out, thousands of datagrams at once): apart from the realtime media suites.
enum Bursts {}

/// Descriptor, thread and memory counts are per process: alone, one test at a time, so other tests' threads and memory do not blur the figures.
enum Leaks {}

/// A real PostgreSQL server (scripts/postgres.sh), stopped when the group's process exits: platforms whose store is PostgreSQL.
enum Cluster {}
