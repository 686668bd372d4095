"""The checked-in generated gRPC code matches what proto/generate.py makes now."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc produced nothing"
    for relative in generated:
        checked_in = ROOT / "proto" / "src" / relative
        assert checked_in.exists(), f"{relative} is not checked in: run `make proto`"
        assert checked_in.read_bytes() == (tmp_path / relative).read_bytes(), (
            f"{relative} differs from the .proto: run `make proto`"
        )
