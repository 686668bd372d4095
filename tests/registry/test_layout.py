from __future__ import annotations

import pytest

from epochstate.core.zookeeper.errors import InvalidName
from epochstate.core.zookeeper.layout import MAX_EPOCH, Layout, epoch_name, parse_epoch_name


def test_paths_under_default_root() -> None:
    layout = Layout()
    assert layout.node("n1") == "/epochstate/nodes/n1"
    assert layout.job("orders") == "/epochstate/jobs/orders"
    assert layout.epoch("orders", 42) == "/epochstate/jobs/orders/epochs/0000000000000000042"
    assert layout.replica("orders", "n1") == "/epochstate/jobs/orders/replicas/n1"


def test_root_is_configurable() -> None:
    assert Layout("/a/b").jobs == "/a/b/jobs"
    assert Layout("/").nodes == "/nodes"
    for bad in ("relative", "/trailing/", "//double"):
        with pytest.raises(InvalidName):
            Layout(bad)


def test_epoch_names_sort_numerically() -> None:
    epochs = [0, 1, 9, 10, 99, 100, 12345, 2**63 - 1, MAX_EPOCH]
    names = [epoch_name(epoch) for epoch in epochs]
    assert all(len(name) == 19 for name in names)
    assert sorted(names) == names
    assert [parse_epoch_name(name) for name in names] == epochs


@pytest.mark.parametrize("name", ["42", "lock-0000000001", "x" * 19, "-000000000000000001"])
def test_other_names_are_not_epochs(name: str) -> None:
    assert parse_epoch_name(name) is None


@pytest.mark.parametrize("epoch", [-1, MAX_EPOCH + 1, True, 1.0, "3"])
def test_bad_epochs_are_rejected(epoch: object) -> None:
    with pytest.raises(InvalidName):
        epoch_name(epoch)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "tab\tname"])
def test_bad_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidName):
        Layout().job(name)
    with pytest.raises(InvalidName):
        Layout().node(name)
