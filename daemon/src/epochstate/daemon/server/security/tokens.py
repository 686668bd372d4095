"""Bearer tokens: a secret per identity, each in its own file, compared in constant time.

A token file holds one token (surrounding whitespace ignored), at least
:data:`MIN_TOKEN_CHARS` characters. Files are read again when they change (a
rotated Kubernetes secret), one ``stat`` per file at most once a second. A
token is compared with every identity's token, each with
``hmac.compare_digest``, so neither the answer's time nor an early exit tells
how much of a guess was right.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from pathlib import Path

from epochstate.core.errors import EpochStateError

log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16
_RECHECK_SECONDS = 1.0


class TokenFileUnusable(EpochStateError):
    """A configured token file cannot be read or holds too short a token; fix auth.tokens."""


def _read(identity: str, path: Path) -> bytes:
    try:
        token = path.read_bytes().strip()
    except OSError as error:
        raise TokenFileUnusable(f"token file of {identity!r} ({path}): {error.strerror}") from error
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileUnusable(
            f"token file of {identity!r} ({path}) holds {len(token)} characters; at least {MIN_TOKEN_CHARS}"
        )
    return token


def _version(path: Path) -> tuple[str, int, int] | None:
    try:
        resolved = os.path.realpath(path)
        st = os.stat(resolved)
    except OSError:
        return None
    return resolved, st.st_ino, st.st_mtime_ns


class TokenBook:
    """The token of each identity in ``files`` (identity -> path).

    Raises TokenFileUnusable at construction for a file that cannot be used; a file
    that later becomes unusable keeps its last good token (with a warning).
    """

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = dict(files)
        self._tokens = {identity: _read(identity, path) for identity, path in self._files.items()}
        self._versions = {identity: _version(path) for identity, path in self._files.items()}
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def identity(self, token: str) -> str | None:
        """The identity whose token is ``token``, or None."""
        self._refresh()
        offered = token.encode()
        found = None
        for identity, known in self._tokens.items():
            if hmac.compare_digest(offered, known):
                found = identity
        return found

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < _RECHECK_SECONDS:
            return
        with self._lock:
            if now - self._checked < _RECHECK_SECONDS:
                return
            self._checked = now
            tokens = dict(self._tokens)
            for identity, path in self._files.items():
                version = _version(path)
                if version == self._versions[identity]:
                    continue
                try:
                    tokens[identity] = _read(identity, path)
                except TokenFileUnusable as error:
                    log.warning("%s; keeping the previous token", error)
                    continue
                self._versions[identity] = version
                log.info("token of %r changed", identity)
            self._tokens = tokens
