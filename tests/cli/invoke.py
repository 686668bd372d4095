"""The real ``epochstate`` command as a subprocess: stdout a pipe, or a
pseudo-terminal of a chosen width."""

from __future__ import annotations

import os
import pty
import re
import socket
import struct
import subprocess
import sys

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def epochstate(target: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``epochstate ARGS --target TARGET``, stdout and stderr pipes."""
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *args, "--target", target],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
    )


def epochstate_on_terminal(target: str, columns: int, *args: str) -> tuple[int, str]:
    """``epochstate ARGS --target TARGET`` with stdout a terminal ``columns`` wide:
    the exit code and what the terminal received (colours stripped, ``\\n`` lines)."""
    import fcntl
    import termios

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "epochstate.cli", *args, "--target", target],
        stdout=terminal,
        stderr=subprocess.PIPE,
        env={**_env(), "COLUMNS": str(columns)},
    )
    os.close(terminal)
    received = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        received += chunk
    os.close(controller)
    code = process.wait(60)
    assert process.stderr is not None
    process.stderr.close()
    return code, ANSI.sub("", received.decode()).replace("\r\n", "\n")


def _env() -> dict[str, str]:
    # Whatever the developer's shell says, the layout is decided by stdout alone.
    quiet = ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR")
    return {k: v for k, v in os.environ.items() if k not in quiet}


def free_target() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
