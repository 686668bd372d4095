"""``python -m epochstate.cli``: the ``epochstate`` command."""

from epochstate.cli.app import main

main()
