"""The start-up check of the daemon's store: every record but the versions, read in full.

What a bounded check can verify, and what it leaves to the reads:

* Checked at start-up, every block verified against its checksum: the records the
  daemon needs to say anything at all (:data:`CHECKED`): job and store
  descriptors, schema versions, progress markers, epoch records, skipped epochs,
  dropped jobs, the id counters and the layout version. They are a few records per
  job and per retained epoch, so the check costs milliseconds whatever the size of
  the data (``bench/startup_check.py`` measures it). A damaged one makes the store
  refuse to open (StoreDamaged): the daemon does not start rather than serve
  "absent", "no epoch yet" or an epoch range it cannot vouch for.
* Left to the reads: the versions (``d``), the retention's garbage index (``g``)
  and the change index (``c``), which grow with the state and the retained epochs. Reading them all
  at start-up costs a full read of the store (seconds to minutes); instead a read
  that meets a damaged block fails with DATA_LOSS (STORE_DAMAGED), as does
  retention, never "absent" (:mod:`damage`).
"""

from __future__ import annotations

from rocksdict import Rdict, ReadOptions

from epochstate.daemon.store import damage, layout

CHECKED: tuple[bytes, ...] = (
    layout.IDS,
    layout.JOB,
    layout.STORE,
    layout.LAYOUT,
    layout.EPOCH,
    layout.PROGRESS,
    layout.SCHEMA,
    layout.UNAVAILABLE,
    layout.DROPPED,
)
"""The key tags whose records the start-up check reads in full (see the module docstring)."""


def check_records(db: Rdict) -> int:
    """Read every record under the :data:`CHECKED` tags, verifying block checksums and
    bypassing the block cache; the number of records read.

    Raises:
        StoreDamaged: a block holding one of them is damaged or unreadable.
    """
    options = ReadOptions()
    options.set_verify_checksums(True)
    options.fill_cache(False)  # type: ignore[call-arg]  # rocksdict's stub omits the flag it takes
    it = db.iter(options)
    count = 0
    for tag in CHECKED:
        it.seek(tag)
        while it.valid():
            key = it.key()
            if not key.startswith(tag):
                break
            it.value()
            count += 1
            it.next()
        else:
            damage.ended(it, f"the records under {tag!r} (start-up check)")
    return count
