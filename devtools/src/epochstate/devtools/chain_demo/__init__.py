"""``epochstate demo-chain``: van Kaam's §6.1 hotness query as two Spark jobs chained with aligned epochs.

``workload`` generates issues and comments, ``jobs`` builds the two queries,
``aligned`` is the cross-job lookup (job 1's state at the epoch aligned with a
batch of job 2), ``run`` starts everything and prints the trace.
"""
