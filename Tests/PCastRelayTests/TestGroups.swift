// Test groups: a suite declared inside one of these namespaces runs in that group's own test
// process (the Makefile's `test` target names groups, never suites); every other suite runs in the
// main group. The same names are declared in each test target that has such suites.

/// Descriptor, thread and memory counts are per process: alone, one test at a time, so other tests' threads and memory do not blur the figures.
enum Leaks {}
