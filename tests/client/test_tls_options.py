"""TlsOptions: from the environment, merged with explicit options, and where a token may go."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from epochstate.client import InvalidArgument, TlsOptions
from epochstate.client.tls import open_channel


def test_the_environment_gives_every_field() -> None:
    env = {
        "EPOCHSTATE_TLS_CA": "/etc/ca.pem",
        "EPOCHSTATE_TLS_CERT": "/etc/c.pem",
        "EPOCHSTATE_TLS_KEY": "/etc/c.key",
        "EPOCHSTATE_TLS_SERVER_NAME": "epochstate.internal",
        "EPOCHSTATE_TLS_TOKEN_FILE": "/run/token",
        "EPOCHSTATE_TLS_ENABLED": "true",
    }
    options = TlsOptions.from_env(env)
    assert options == TlsOptions(
        ca=Path("/etc/ca.pem"),
        cert=Path("/etc/c.pem"),
        key=Path("/etc/c.key"),
        server_name="epochstate.internal",
        token_file=Path("/run/token"),
        enabled=True,
    )
    assert options.secure
    assert TlsOptions.from_env({}) == TlsOptions() and not TlsOptions().secure
    assert TlsOptions.from_env({"EPOCHSTATE_TLS_ENABLED": "1"}).secure
    assert TlsOptions(server_name="x").secure and not TlsOptions(token_file=Path("t")).secure
    assert options.merged(server_name=None, ca=Path("/other")).ca == Path("/other")
    assert pickle.loads(pickle.dumps(options)) == options  # AlignedLookup ships it to executors


def test_a_token_never_goes_over_plaintext_tcp(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-of-sixteen-chars\n")
    with pytest.raises(InvalidArgument, match="not plaintext TCP"):
        open_channel("127.0.0.1:7070", TlsOptions(token_file=token))
    open_channel("unix:///tmp/x.sock", TlsOptions(token_file=token)).close()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidArgument, match="is empty"):
        open_channel("unix:///tmp/x.sock", TlsOptions(token_file=empty))
    with pytest.raises(InvalidArgument, match="cannot read TLS file"):
        open_channel("127.0.0.1:7070", TlsOptions(ca=tmp_path / "missing.pem"))
    with pytest.raises(InvalidArgument, match="go together"):
        open_channel("127.0.0.1:7070", TlsOptions(cert=tmp_path / "c.pem"))
