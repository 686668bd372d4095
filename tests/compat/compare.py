"""Every store x epoch x key of a release's checkpoints, through the daemon, against
the dump of Spark's reader: counted, so a run says how much it checked."""

from __future__ import annotations

from dataclasses import dataclass, field

from epochstate.client import EpochStateClient
from tests.compat.runner import StoreDump
from tests.compat.workload.values import canon, decode, encode

MISMATCHES_SHOWN = 20


@dataclass
class Tally:
    """What was compared, and every difference found."""

    stores: int = 0
    lookups: int = 0  # (key, epoch) pairs looked up
    scans: int = 0  # (store, epoch) pairs scanned
    mismatches: list[str] = field(default_factory=list)

    def report(self) -> str:
        shown = "\n".join(self.mismatches[:MISMATCHES_SHOWN])
        more = len(self.mismatches) - MISMATCHES_SHOWN
        return shown + (f"\n... and {more} more" if more > 0 else "")


def check_store(client: EpochStateClient, dump: StoreDump, tally: Tally) -> None:
    """At every epoch of ``dump``, every key the store ever held reads as Spark's reader
    has it (found or absent, value, partition), and a paged Scan lists exactly its keys."""
    where = f"{dump.job} {dump.operator_id}/{dump.store}"
    keys = {canon(key): key for rows in dump.epochs.values() for key, _, _ in rows}
    arguments = [decode(key) for key in keys.values()]
    tally.stores += 1
    for epoch, rows in sorted(dump.epochs.items()):
        expected = {canon(key): [value, partition] for key, value, partition in rows}
        lookups = client.multi_get(
            dump.job, arguments, epoch=epoch, operator_id=dump.operator_id, store=dump.store
        )
        for name, lookup in zip(keys, lookups, strict=True):
            tally.lookups += 1
            served = [encode(lookup.value), lookup.partition] if lookup.found else None
            if lookup.epoch != epoch or served != expected.get(name):
                tally.mismatches.append(
                    f"{where} epoch {epoch} key {name}: Spark {expected.get(name)}, daemon {served} "
                    f"(at epoch {lookup.epoch})"
                )
        scanned = [
            canon(encode(lookup.key))
            for lookup in client.scan(
                dump.job, epoch=epoch, operator_id=dump.operator_id, store=dump.store, page_size=3
            )
        ]
        tally.scans += 1
        if sorted(scanned) != sorted(expected):
            tally.mismatches.append(
                f"{where} epoch {epoch}: scan {sorted(scanned)}, Spark {sorted(expected)}"
            )
