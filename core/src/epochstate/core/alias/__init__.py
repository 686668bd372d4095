"""Aliases: a logical job name that follows the hot-swaps of an output subject.

An alias (``orders``) names the job writing an output subject now: its first job
answers every epoch until a swap of that subject moves the alias to the swap's
new job, which answers the epochs after the swap epoch. Epochs of an alias are
the epochs of the *input* subject its jobs read aligned, the one numbering the
old and the new job share, so an answer pinned to an alias epoch never changes.

Modules: ``records`` (the alias znode), ``registry`` (read and write it),
``chain`` (which job answers which epochs: a pure function of the alias and the
subject's swaps), ``errors``. Nothing here imports Spark, so the daemon and the
CLI both use it.
"""
