"""Docs and code comments name only repository paths that exist.

Where: every tracked Markdown file (README.md, docs/, bench/results/; the whole
text, code blocks included), and the comments and docstrings of every tracked
Python file.

What counts as a repository path: a run of name characters (letters, digits,
``_``, ``.``, ``-``) and ``/`` that has at least two components, whose first
component is a top-level folder of the repository or the name of a package
folder (a tracked folder with an ``__init__.py``, e.g. ``store``, ``server``,
``ingest``), and whose last component has a file extension or is followed by
``/`` (``daemon/store/view.py``, ``sources/hdfs_backed/``). So ``read/write``,
``hdfs/rocksdb`` or ``TCP/Unix`` are words, not paths. Not paths either:
absolute paths and URIs (``/var/lib/...``, ``s3a://bucket/path``), and patterns:
a run next to ``<``, ``{``, ``*`` or ``$`` (``bench/*.py``, ``state/<operatorId>/``).

How a relative path resolves: it names something that exists when, joined to the
repository root, to a folder that holds the mentioning file, to a package folder or
to a namespace folder that holds one (``daemon/src/epochstate``), it is a tracked
file or a folder of tracked files (a folder when it ends with ``/``). So a path in
the namespace, ``daemon/store/view.py``, names the module
``epochstate.daemon.store.view``. So ``store/view.py`` in ``server/service.py`` is the daemon's
``store/view.py`` (``daemon/src/epochstate/daemon/store/view.py``), and
``sources/hdfs_backed/`` in docs/architecture.md is the daemon's ``sources/hdfs_backed/``.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent

_RUN = re.compile(r"[\w.\-/]+")
# Next to one of these, a run is part of a URI, a template or a glob, not a path.
_BEFORE = set(":<>{}*$~@%")
_AFTER = set("<>{}*$%")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class Tree:
    """The tracked files of the repository and the folders that hold them."""

    files: frozenset[str]
    folders: frozenset[str]
    roots: frozenset[str]  # top-level folders and package folder names: a path's first component
    bases: tuple[str, ...]  # package folders, against which a relative path resolves

    @classmethod
    def tracked(cls) -> Tree:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        # A tracked file deleted in the work tree is gone for a reader of the tree too.
        files = frozenset(f for f in listed.split("\0") if f and (ROOT / f).exists())
        folders = frozenset(
            str(parent) for f in files for parent in PurePosixPath(f).parents if str(parent) != "."
        )
        top = {f.split("/", 1)[0] for f in folders}
        packages = {str(PurePosixPath(f).parent) for f in files if f.endswith("/__init__.py")}
        roots = frozenset(top | {PurePosixPath(p).name for p in packages})
        # The namespace folders that hold the distributions' packages (core/src/epochstate):
        # a path in the namespace, such as daemon/store/view.py, is one against them.
        namespaces = {str(PurePosixPath(p).parent) for p in packages} - packages
        return cls(files, folders, roots, tuple(sorted(top | packages | namespaces)))

    def exists(self, path: str, mentioned_in: str) -> bool:
        folder_only = path.endswith("/")
        path = path.rstrip("/")
        holders = [str(p) for p in PurePosixPath(mentioned_in).parents if str(p) != "."]
        for base in ("", *holders, *self.bases):
            candidate = f"{base}/{path}" if base else path
            if candidate in self.folders or (not folder_only and candidate in self.files):
                return True
        return False


def paths_in(text: str, tree: Tree) -> Iterator[tuple[int, str]]:
    """(offset, path) of every run of ``text`` that counts as a repository path."""
    for match in _RUN.finditer(text):
        run, start, end = match.group(), match.start(), match.end()
        if start > 0 and text[start - 1] in _BEFORE:
            continue
        if end < len(text) and text[end] in _AFTER:
            continue
        run = run.rstrip(".")
        if run.startswith("./"):
            run = run[2:]
        if run.startswith("/") or "//" in run:
            continue
        parts = run.rstrip("/").split("/")
        if len(parts) < 2 or any(p in ("", ".", "..") for p in parts):
            continue
        if parts[0] not in tree.roots:
            continue
        if not (run.endswith("/") or _EXTENSION.search(parts[-1])):
            continue
        yield start, run


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python module."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                yield node.body[0].lineno, docstring


def stale_paths(tree: Tree) -> list[str]:
    found: list[str] = []
    for doc in sorted(f for f in tree.files if f.endswith(".md")):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for offset, path in paths_in(text, tree):
            if not tree.exists(path, doc):
                found.append(f"{doc}:{text.count(chr(10), 0, offset) + 1}: {path}")
    for module in sorted(f for f in tree.files if f.endswith(".py")):
        for line, prose in python_prose((ROOT / module).read_text(encoding="utf-8")):
            for offset, path in paths_in(prose, tree):
                if not tree.exists(path, module):
                    found.append(f"{module}:{line + prose.count(chr(10), 0, offset)}: {path}")
    return found


def test_docs_and_comments_name_existing_paths() -> None:
    assert stale_paths(Tree.tracked()) == []


def test_the_rule_tells_paths_from_words() -> None:
    tree = Tree(
        files=frozenset({"daemon/store/view.py", "daemon/store/__init__.py", "docs/groups.md"}),
        folders=frozenset({"daemon", "daemon/store", "docs"}),
        roots=frozenset({"daemon", "docs", "store"}),
        bases=("daemon", "daemon/store", "docs"),
    )
    text = (
        "see store/view.py, daemon/store/, docs/groups.md#routing and server/view_pool.py; "
        "read/write, store/<job>/x.md, docs/*.md, s3a://docs/x.md, /daemon/x.py, store/view"
    )
    assert [p for _, p in paths_in(text, tree)] == [
        "store/view.py",
        "daemon/store/",
        "docs/groups.md",
    ]
    # With no root named server here, the third name is a word; store/ resolves under daemon/.
    assert tree.exists("store/view.py", "daemon/server/service.py")
    assert not tree.exists("store/view_pool.py", "daemon/server/service.py")
    assert not tree.exists("daemon/store/view.py/", "README.md")
