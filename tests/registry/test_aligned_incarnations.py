"""``aligned_with`` across a recreated reader checkpoint: a mapping is used only for its own query.

Real ZooKeeper, the daemon's real view and resolution; records in the shared format.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.epochs import EpochWaitTimedOut, IncarnationChanged
from epochstate.daemon.store.catalog import Catalog
from tests.registry.test_subject_view import LAYOUT, aligned, job, write_epochs

OLD, NEW = "q-old", "q-new"


def write_source(client: KazooClient, reader: str, mapping: dict[int, int], query_id: str | None) -> None:
    path = LAYOUT.subject_source("t", reader)
    data = SubjectSourceRecord("aligned", mapping, 1, {}, query_id).encode()
    if client.exists(path):
        client.set(path, data)
    else:
        client.create(path, data, makepath=True)


@pytest.fixture
def catalog() -> Catalog:
    found = Catalog()
    found.put(job("orders"))
    return found


@pytest.fixture
def alignment(zk_client: KazooClient, catalog: Catalog) -> Iterator[SubjectAlignment]:
    view = SubjectView(zk_client)
    yield SubjectAlignment(view, catalog)
    view.close()


def test_the_old_querys_mapping_never_answers_for_the_new_query(
    zk_client: KazooClient, alignment: SubjectAlignment, catalog: Catalog
) -> None:
    write_epochs(zk_client, "t", range(12), "orders", "q-orders")
    write_source(zk_client, "enrich", {j: j for j in range(10)}, OLD)  # the old query read 0..9
    catalog.put(job("enrich", NEW))  # the daemon follows the recreated checkpoint's query

    # Not recorded by the new query yet: no answer (neither "epoch 3 read subject epoch 3").
    with pytest.raises(EpochWaitTimedOut, match=f"query {NEW} did not record its mapping"):
        alignment.epoch_of(job("orders"), aligned("enrich", 3), 0.3)
    with pytest.raises(EpochWaitTimedOut, match=f"query {NEW} did not record its mapping"):
        alignment.epoch_of(job("enrich", NEW), aligned("orders", 3), 0.3)

    answers: list[int] = []
    waiter = threading.Thread(
        target=lambda: answers.append(alignment.epoch_of(job("orders"), aligned("enrich", 1), 30.0))
    )
    waiter.start()
    write_source(zk_client, "enrich", {0: 10, 1: 11}, NEW)  # the new query started at subject epoch 10
    waiter.join(40)
    assert answers == [11]

    new_truth = {0: 10, 1: 11}
    wrong = sum(
        alignment.epoch_of(job("orders"), aligned("enrich", j), 5.0) != k for j, k in new_truth.items()
    ) + sum(
        alignment.epoch_of(job("enrich", NEW), aligned("orders", k), 5.0) != j for j, k in new_truth.items()
    )
    assert wrong == 0


def test_a_read_pinned_to_the_old_query_is_refused_naming_both(
    zk_client: KazooClient, alignment: SubjectAlignment, catalog: Catalog
) -> None:
    write_epochs(zk_client, "t", range(12), "orders", "q-orders")
    write_source(zk_client, "enrich", {0: 10}, NEW)
    catalog.put(job("enrich", NEW))
    with pytest.raises(IncarnationChanged) as refused:
        alignment.epoch_of(job("enrich", OLD), aligned("orders", 10), 5.0)
    assert refused.value.metadata == {"job": "enrich", "requestedQueryId": OLD, "currentQueryId": NEW}
    assert "aligning through subject 't'" in str(refused.value)
    assert alignment.epoch_of(job("enrich", NEW), aligned("orders", 10), 5.0) == 0


def test_records_without_a_query_id_and_jobs_not_followed_resolve_as_before(
    zk_client: KazooClient, alignment: SubjectAlignment
) -> None:
    write_epochs(zk_client, "t", range(4), "orders", "q-orders")
    write_source(zk_client, "enrich", {5: 0, 6: 1}, None)  # written before records had query ids
    write_source(zk_client, "audit", {0: 2, 1: 3}, "q-audit-2")  # the daemon does not follow audit
    assert alignment.epoch_of(job("orders"), aligned("enrich", 6), 1.0) == 1
    assert alignment.epoch_of(job("enrich", "any"), aligned("orders", 1), 1.0) == 6
    assert alignment.epoch_of(job("orders"), aligned("audit", 1), 1.0) == 3
