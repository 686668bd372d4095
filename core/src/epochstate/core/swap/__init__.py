"""Hot-swap of an output subject from one aligned job to another (van Kaam §2.3.1, §4.2).

Two jobs read one input subject aligned, so their epochs are the input's subject
epochs, one to one. A swap moves the ownership of an output subject from the old
job to the new one at a *swap epoch* ``S`` of the input: the old job's sink
writes the output of every input epoch up to and including ``S``, the new job's
every one after it. The jobs agree in two steps through one znode per output
subject: both *prepare* in epoch ``S - 2``, and a later epoch of either *commits*.

Modules: ``records`` (the swap record, its states, and the ownership function the
sinks ask), ``registry`` (the znodes), ``coordinator`` (plan, status, abort),
``participant`` (what a job's sink calls at each epoch), ``errors``.
Nothing here imports Spark or Kafka, so the daemon and the CLI can use it.
"""
