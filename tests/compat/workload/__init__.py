"""The compatibility workload, run by each Spark release's own interpreter.

It imports only the standard library, that release's PySpark and (for the
listener and the aligned chain) epochstate's Spark side, and is importable both
as ``tests.compat.workload`` (the test side reads its value encoding) and, from
the package view the suite puts on a release's path, as
``epochstate_compat_workload`` (hence relative imports only).
"""
