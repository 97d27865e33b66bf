// Test groups: a suite declared inside one of these namespaces runs in a test process of its own
// (the Makefile's `test` target names groups, never suites); every other suite of this target runs
// in the CLI target's process. The same names are declared in each test target that has such suites.

/// `pcast serve` nodes sharing a real PostgreSQL, publishers and viewers as processes, a node
/// killed: apart from the other CLI suites, whose commands would compete with them for the CPU.
enum Cluster {}

/// Suites that change this machine as a whole (a Debian package installed into /usr, a system
/// user): one test at a time, alone, so no other suite runs while /usr/bin/pcast is installed.
enum OneAtATime {}
