"""A Connect-style group of daemons in ZooKeeper: job definitions, membership, election, assignment.

``definitions`` keeps the group's job definitions (``watch`` follows them),
``membership`` this daemon's ephemeral member znode, ``assignor`` decides who
follows what (a pure function), ``assignments`` reads and writes the one
assignment znode (fenced by the leader's election znode), ``leader`` runs the
election and the assignor, ``member`` follows the assignment for one daemon.
See docs/zookeeper.md, "Groups".
"""
