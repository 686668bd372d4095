"""The one code-generation helper every per-schema generator goes through."""

from __future__ import annotations

import traceback

import pytest

from epochstate.daemon.codec.codegen import FunctionSource, cached_count, indented


def adder(label: str, step: object) -> FunctionSource:
    source = FunctionSource(label, "add", ["x"])
    source.bind("STEP", step)
    source.add("if x < 0:", *indented(["raise ValueError('negative')"]), "return x + STEP")
    return source


def test_bound_objects_are_defaults_and_fast_locals() -> None:
    add = adder("test adder", 3).compile()
    assert add(4) == 7
    assert add.__defaults__ == (3,)
    assert add.__code__.co_varnames[:2] == ("x", "STEP")
    assert "STEP" not in add.__code__.co_names  # not a global


def test_one_source_compiles_once_into_independent_functions() -> None:
    before = cached_count()
    three, five = adder("test cache", 3).compile(), adder("test cache", 5).compile()
    assert cached_count() == before + 1
    assert three.__code__ is five.__code__
    assert (three(1), five(1)) == (4, 6)
    other = FunctionSource("test cache", "add", ["x"])
    other.bind("STEP", 1)
    other.add("return x - STEP")
    assert other.compile()(1) == 0
    assert cached_count() == before + 2


def test_tracebacks_name_the_generator_and_show_the_line() -> None:
    add = adder("test traceback", 1).compile()
    filename = add.__code__.co_filename
    assert filename.startswith("<codegen test traceback #")
    with pytest.raises(ValueError) as caught:
        add(-1)
    text = "".join(traceback.format_exception(caught.value))
    assert filename in text
    assert "raise ValueError('negative')" in text


def test_names_are_checked_and_fresh_names_are_unique() -> None:
    source = FunctionSource("test names", "f", ["a"])
    with pytest.raises(ValueError, match="parameter"):
        source.bind("a", 1)
    with pytest.raises(ValueError, match="not a name"):
        source.bind("x y", 1)
    with pytest.raises(ValueError, match="not a name"):
        FunctionSource("test names", "def", [])
    marker = object()
    source.bind("K", marker)
    source.bind("K", marker)  # the same object again is fine
    with pytest.raises(ValueError, match="already bound"):
        source.bind("K", object())
    source.bind("E1", "taken")
    assert [source.fresh("E", n) for n in range(3)] == ["E0", "E2", "E3"]
    source.add("return (a, E0, E2, E3)")
    assert source.compile()("a") == ("a", 0, 1, 2)


def test_an_empty_body_and_no_bindings_compile() -> None:
    assert FunctionSource("test empty", "nothing", []).compile()() is None
    assert FunctionSource("test empty", "nothing", ["x"]).source().startswith("def nothing(x):")


def test_a_label_from_a_hostile_schema_still_compiles() -> None:
    # A fuzz finding: a schema field named with a NUL made compile() refuse the file name.
    code = FunctionSource("reader struct<a\x00b:int,\u2028:string>", "read", ["x"])
    code.add("return x")
    assert code.compile()(7) == 7
    assert code.label == "reader struct<a\\x00b:int,\\u2028:string>"
