"""The benchmarks: each module runs as ``python -m bench.<name>`` from the repository root
(the Makefile's ``bench*`` targets do); each prints a table against a baseline measured in
the same run (docs/benchmarks.md)."""
