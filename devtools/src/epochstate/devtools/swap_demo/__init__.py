"""``epochstate demo-swap``: a counting job hot-swapped for its new version (van Kaam §2.3.1, §4.2).

``orders`` produces the input subject, ``jobs`` builds the Spark queries,
``lookups`` reads the swapped job's state on both sides of the swap epoch,
``checks`` holds the counter check and the shadow comparison, ``run`` starts
everything and follows the swap, ``report`` prints what came of it.
"""
