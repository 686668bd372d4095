"""The release of epochstate, one for every ``epochstate-*`` distribution.

Each distribution's ``pyproject.toml`` states the same version (tests/test_packaging.py
checks they agree); this is the one code reports, such as the daemon in its ZooKeeper
registration and its start-up line.
"""

VERSION = "0.1.0"
