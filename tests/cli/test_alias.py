"""``epochstate alias set|show|list|delete`` on a real ZooKeeper: a swap moves what ``show`` says."""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.zookeeper.layout import Layout
from tests.swap.jobs import IN, NEW, OLD, OUT, prepare_subjects


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output if "--json" in args else " ".join(result.output.split())


def test_set_show_list_delete_and_the_refusals(zk_client: KazooClient, zk_connect: str) -> None:
    prepare_subjects(SubjectRegistry(zk_client), old_at=4, new_at=3)
    z = ["--zookeeper", zk_connect]
    code, output = cli("alias", "set", "orders", "--job", OLD, "--subject", OUT, "--json", *z)
    assert code == 0, output
    assert json.loads(output) == {
        "name": "orders",
        "subject": OUT,
        "input": IN,  # the one input the job reads aligned
        "jobs": [{"job": OLD, "from_epoch": None, "to_epoch": None, "swap": None}],
        "undecided_after": None,
        "pending_swap": None,
    }
    assert cli("swap", "plan", "--subject", OUT, "--from", OLD, "--to", NEW, "--at", "8", *z)[0] == 0
    code, output = cli("alias", "show", "orders", *z)
    assert code == 0 and f"{OLD}: epochs from the first on" in output, output
    assert "epochs after 8: swap 1 not decided yet" in output, output
    assert json.loads(cli("alias", "list", "--json", *z)[1]) == {"aliases": ["orders"]}

    code, output = cli("alias", "set", "other", "--job", "nobody", "--subject", OUT, *z)
    assert code == 4 and "reads not exactly one input aligned" in output, output
    zk_client.create(Layout().job("counts"), b"{}", makepath=True)
    code, output = cli("alias", "set", "counts", "--job", OLD, "--subject", OUT, *z)
    assert code == 4 and "AMBIGUOUS_NAME" in output, output

    assert cli("alias", "delete", "orders", *z)[0] == 0
    code, output = cli("alias", "show", "orders", *z)
    assert code == 3 and "ALIAS_NOT_FOUND" in output, output
