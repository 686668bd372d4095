"""Client settings: the caller's, with the settings this package's guarantees rest on."""

from __future__ import annotations

from collections.abc import Mapping

Setting = str | int | float | bool
ClientConfig = Mapping[str, Setting]

# Readers assign partitions and never commit, so the group is only a required name.
DEFAULT_GROUP_ID = "epochstate-aligned"


def merged(config: ClientConfig, required: ClientConfig) -> dict[str, Setting]:
    """``config`` with ``required`` on top: settings a guarantee depends on always win."""
    return {**config, **required}


def consumer_settings(config: ClientConfig, required: ClientConfig) -> dict[str, Setting]:
    """Like :func:`merged`, for a consumer that only assigns: a group id unless one is given."""
    return {"group.id": DEFAULT_GROUP_ID, **config, **required}
