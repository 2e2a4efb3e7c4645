"""The suite's own pytest plugins (tests/README.md, "Tiers and parallelism"), registered by
tests/conftest.py. Each keeps its decisions in pure functions that test_harness.py tests:
- needs: what a test's markers ask for (where its servers are, which locks it holds);
- locks: the machine-wide flocks that hold those needs across every pglab suite;
- cpu_weight: the cgroup v1 CPU weight of the other workers beside a favoured test;
- units: which tests go to one xdist worker together, and in which order;
- xdist_units: the one place that depends on pytest-xdist's internals (pinned);
- homes: each worker's PGLAB_HOMEs and temp dirs, and the footprint check;
- durations: each test's time, for the next run's order;
- skips: a skip as root that hides a missing part fails.
"""
