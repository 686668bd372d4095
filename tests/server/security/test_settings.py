"""The tls and auth settings, checkpoint roots and token files, without a daemon."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochstate.daemon.config import ConfigError, load_settings
from epochstate.daemon.server.security.checkpoints import CheckpointRoots
from epochstate.daemon.server.security.tokens import TokenBook, TokenFileUnusable
from epochstate.daemon.server.status import CheckpointNotAllowed


def test_settings_from_a_file_and_nested_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("tls: {cert: /c.pem, key: /c.key}\nauth: {enabled: true, roles: {ops: [admin]}}\n")
    # The clients' variables may be set where the daemon runs: they are not its settings.
    monkeypatch.setenv("EPOCHSTATE_TLS_CA", "/ca.pem")
    monkeypatch.setenv("EPOCHSTATE_TLS_ENABLED", "1")
    monkeypatch.setenv("EPOCHSTATE_AUTH__CHECKPOINT_ROOTS", '["/checkpoints"]')
    settings = load_settings(config, listen="0.0.0.0:7070")
    assert settings.tls.cert == Path("/c.pem") and settings.tls.client_ca is None
    assert settings.auth.enabled and settings.auth.checkpoint_roots == ["/checkpoints"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tls: {cert: /c.pem}", "tls.cert and tls.key go together"),
        ("tls: {client_ca: /ca.pem}", "tls.client_ca needs tls.cert"),
        ("auth: {roles: {a: [read]}, tokens: {b: /t}}", "identities without roles: b"),
        ("auth: {roles: {a: [write]}}", "auth.roles.a.0"),
        ("listen: 0.0.0.0:7070\ntls: {cert: /c.pem, key: /c.key}", "without auth (auth.enabled)"),
    ],
)
def test_settings_that_cannot_be_used(tmp_path: Path, text: str, problem: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_settings(config)


def test_checkpoint_roots_compare_whole_components(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "orders").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "checkpoints" / "escape")
    roots = CheckpointRoots([str(tmp_path / "checkpoints"), "s3a://bucket/streaming/"])
    allowed = [
        str(tmp_path / "checkpoints" / "orders"),
        f"file://{tmp_path}/checkpoints/new",
        "s3://bucket/streaming/orders",
        "s3a://BUCKET/streaming/./orders",
    ]
    refused = [
        str(tmp_path / "checkpoints-other"),
        str(tmp_path / "checkpoints" / ".." / "outside"),
        str(tmp_path / "checkpoints" / "escape"),  # a symlink out of the root
        "s3://bucket/streaming/../private",
        "s3://bucket/streamingx/orders",
        "s3://other/streaming/orders",
        "gs://bucket/streaming/orders",
        "relative/path",
    ]
    for location in allowed:
        roots.check(location)
    for location in refused:
        with pytest.raises(CheckpointNotAllowed):
            roots.check(location)
    with pytest.raises(CheckpointNotAllowed, match=r"no auth\.checkpoint_roots"):
        CheckpointRoots([]).check(str(tmp_path))
    with pytest.raises(ValueError, match="absolute"):
        CheckpointRoots(["relative"])


def test_token_files(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too-short")
    with pytest.raises(TokenFileUnusable, match="at least 16"):
        TokenBook({"a": short})
    with pytest.raises(TokenFileUnusable, match="No such file"):
        TokenBook({"a": tmp_path / "missing"})
    token = tmp_path / "a"
    token.write_text("first-token-0123456789\n")
    book = TokenBook({"a": token})
    assert book.identity("first-token-0123456789") == "a"
    assert book.identity("first-token-012345678") is None
    assert book.identity("") is None
