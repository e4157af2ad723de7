"""The WARNING lines kernelforge logs: each says it is kernelforge's, since a program that
set up no logging gets them bare (Python's last-resort handler writes no logger name), and
the command line writes them as its own ``warning:`` lines."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

import kernelforge
from kernelforge.errors import WARNING_PREFIX

PACKAGE = Path(kernelforge.__file__).parent
#: Calls that log, or warn, at WARNING or above.
LOUD = {"warning", "warn", "error", "critical", "exception"}
LOGGERS = {"logger", "log", "logging", "warnings"}


def loud_calls() -> list[tuple[str, int, ast.expr | None]]:
    """``(file, line, first argument)`` of each call of the package that logs or warns
    at WARNING or above."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LOUD and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in LOGGERS):
                where = str(path.relative_to(PACKAGE))
                found.append((where, node.lineno, node.args[0] if node.args else None))
    return found


def test_every_warning_of_the_package_begins_with_its_name() -> None:
    calls = loud_calls()
    assert len(calls) >= 30  # the scan sees the package's warnings
    unnamed = [f"{where}:{line}" for where, line, arg in calls
               if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                       and arg.value.startswith(WARNING_PREFIX))]
    assert unnamed == [], f"these do not begin with {WARNING_PREFIX!r}: {unnamed}"


def test_the_command_line_labels_a_warning_instead_of_naming_kernelforge_twice(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelforge ...` writes a library warning as `warning: <what>`, not
    `warning: kernelforge: <what>`: its own lines name no program either (the handler
    main() installs where the program set up no logging)."""
    from kernelforge.cli import _Labelled

    record = logging.LogRecord("kernelforge.cache", logging.WARNING, __file__, 1,
                               "kernelforge: ignoring %s: not a download cache entry",
                               ("x",), None)
    _Labelled(logging.WARNING).handle(record)
    assert capsys.readouterr().err == "warning: ignoring x: not a download cache entry\n"
