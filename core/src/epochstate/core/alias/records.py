"""The alias znode: ``<root>/aliases/<name>``.

::

    {"name": "orders", "job": "counts-v1", "subject": "counts", "input": "orders-in",
     "created_at_ms": ms}

``job`` answers every epoch until a swap of output subject ``subject`` moves the
alias on (``chain``); ``input`` is the subject whose epochs number the alias's
epochs, the one the jobs read aligned. The record is written when the alias is
defined and never changed by a swap: the swaps themselves, whose decisions never
go back, say where the alias went.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from epochstate.core.alignment.errors import CorruptSubjectRecord
from epochstate.core.zookeeper.layout import check_name
from epochstate.core.zookeeper.records import encode


@dataclass(frozen=True)
class AliasRecord:
    """Alias ``name`` of job ``job``, which writes output subject ``subject`` from input ``input``."""

    name: str
    job: str
    subject: str
    input: str
    created_at_ms: int = 0

    def __post_init__(self) -> None:
        for kind, value in (("alias", self.name), ("job", self.job)):
            check_name(kind, value)
        for kind, value in (("subject", self.subject), ("input", self.input)):
            check_name(kind, value)
        if self.name == self.job:
            raise ValueError(f"alias {self.name!r} cannot name a job of its own name")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job": self.job,
            "subject": self.subject,
            "input": self.input,
            "created_at_ms": self.created_at_ms,
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, name: str, data: bytes | None) -> AliasRecord:
        """The record in an alias znode; CorruptSubjectRecord if it is not one."""
        try:
            value = json.loads(data or b"")
            return cls(
                name=str(value["name"]),
                job=str(value["job"]),
                subject=str(value["subject"]),
                input=str(value["input"]),
                created_at_ms=int(value.get("created_at_ms", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptSubjectRecord(f"the alias {name!r}: {error!r}") from error
