// Test groups: a suite declared inside one of these namespaces runs in that group's own test
// process (the Makefile's `test` target names groups, never suites); every other suite runs in the
// main group. The same names are declared in each test target that has such suites.

/// Many concurrent clients and threads, or CPU-heavy comparisons: in a process of their own so their load does not starve the frame-by-frame media suites of the main group.
enum ManyClients {}

/// A real PostgreSQL server (scripts/postgres.sh), started once for the group's process and stopped when it exits: the cluster's shared store and several nodes on it.
enum Cluster {}
