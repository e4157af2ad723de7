"""The kernels a project depends on, read from the dependency tables of its
``pyproject.toml``: kernelforge's ``[tool.kernelforge.dependencies]`` and Hugging Face's
``[tool.kernels.dependencies]``."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelforge.errors import LockError
from kernelforge.hub.base import validate_repo_id
from kernelforge.lock._model import _TABLES, Requirement

# the package's name, as before it was split into modules: what users' logging filters on
logger = logging.getLogger("kernelforge.lock")


def _parse_spec(repo_id: str, value: Any, table: str, where: Path) -> Requirement:
    key = f"{table}.{repo_id!r}"

    def bad(problem: str) -> LockError:
        return LockError(f"{where}: key {key}: {problem}; expected a major version (1), "
                         "'>=N', or a table {version = N} / {revision = \"branch, tag or "
                         "commit\"}")

    try:
        validate_repo_id(repo_id)
    except ValueError as err:
        # the key is what is wrong, not its value: no word about the values it takes
        raise LockError(f"{where}: key {key}: {err}; the keys of [{table}] are repository "
                        "ids, e.g. \"kernels-community/relu\" = 1") from err
    if isinstance(value, dict):
        unknown = set(value) - {"version", "revision"}
        if unknown or len(value) != 1:
            from kernelforge.archs import closest

            near = [f"'{k}' (did you mean '{meant}'?)" for k in sorted(unknown)
                    if (meant := closest(k, ("version", "revision")))]
            raise bad(f"a table needs exactly one of 'version' or 'revision', got "
                      f"{sorted(value)}" + (f"; {', '.join(near)}" if near else ""))
        if "revision" in value:
            if not isinstance(value["revision"], str):
                raise bad(f"revision {value['revision']!r} is not a string")
            if not value["revision"].strip():
                raise bad(f"revision {value['revision']!r} must not be empty")
            return Requirement(repo_id, revision=value["revision"], table=table)
        value = value["version"]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Requirement(repo_id, version=value, table=table)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(>=|==)?\s*v?(\d+)\s*", value)
        if m:
            n = int(m.group(2))
            return (Requirement(repo_id, min_version=n, table=table) if m.group(1) == ">="
                    else Requirement(repo_id, version=n, table=table))
    shown = json.dumps(value) if isinstance(value, (bool, float)) else repr(value)  # TOML's
    raise bad(f"{shown} is not a version requirement")


def _requirement(found: dict[str, Requirement], repo_id: str, value: Any, table: str,
                 path: Path) -> Requirement:
    """One entry of a dependency table, checked against those ``found`` before it (keyed
    by the id in lower case)."""
    req = _parse_spec(repo_id, value, table, path)
    other = found.get(repo_id.lower())  # ids ignore case, as the hubs resolve them
    if other is not None and other.repo_id != repo_id:
        where = (f"both in [{table}]" if other.table == table
                 else f"in [{other.table}] and [{table}]")
        raise LockError(f"{path}: {other.repo_id!r} and {repo_id!r} ({where}) name one "
                        "repository (repository ids ignore case); keep one of them")
    if other is not None and other.to_json() != req.to_json():
        raise LockError(f"{path}: {repo_id} is listed in [{other.table}] as "
                        f"{other.to_json()} and in [{table}] as {req.to_json()}; keep one")
    return req


def read_requirements(project: str | os.PathLike[str]) -> list[Requirement]:
    """The kernels a project depends on, from its ``pyproject.toml``.

    Args:
        project: the project directory (or its ``pyproject.toml``).

    Returns:
        The requirements, sorted by repository id.

    Raises:
        LockError: no ``pyproject.toml``, no dependency table or only empty ones, a
            malformed entry, or one kernel listed differently in both tables (every
            entry's problem, together).
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    from kernelforge._parse import toml_loads, undecodable_at

    path = Path(project)
    if path.name != "pyproject.toml" and path.is_file():  # a lock file, say: not the project
        raise LockError(f"{path}: a file, not a project; 'kernelforge lock' takes the project "
                        "directory (or its pyproject.toml), which lists the kernels to lock")
    path = path if path.name == "pyproject.toml" else path / "pyproject.toml"
    try:
        doc = toml_loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockError(f"{path}: not found; 'kernelforge lock' reads the project's "
                        "pyproject.toml") from None
    except UnicodeDecodeError as err:
        raise LockError(f"{path}: cannot be read as TOML ({err}; at {undecodable_at(err)}); "
                        "save it as UTF-8") from err
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise LockError(f"{path}: cannot be read as TOML ({err})") from err
    found: dict[str, Requirement] = {}
    problems: list[str] = []  # every entry's, reported together
    present: list[str] = []  # the tables written, empty or not
    for table in _TABLES:
        node: Any = doc
        for part in table.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        present.append(table)
        if not isinstance(node, dict):
            problems.append(f"{path}: [{table}] must be a table of 'org/name' = version")
            continue
        for repo_id, value in node.items():
            try:
                found_req = _requirement(found, repo_id, value, table, path)
            except LockError as err:
                problems.append(str(err))
                continue
            found[repo_id.lower()] = found_req
            if table == _TABLES[1] and type(value) is not int:
                # Hugging Face's own `kernels lock` takes each value there as a version
                # number and fails on anything else, such as ">=1" or a table.
                logger.warning(
                    "kernelforge: %s: [%s] %r is not a plain version number: kernelforge reads it, "
                    "but Hugging Face's 'kernels lock' accepts only a version number there and "
                    "fails on it; list it under [%s] to keep [%s] usable by both tools",
                    path, table, repo_id, _TABLES[0], table)
    if len(problems) == 1:
        raise LockError(problems[0])
    if problems:
        raise LockError(f"{path}: {len(problems)} problems:\n" + "\n".join(
            f"  - {p.removeprefix(f'{path}: ')}" for p in problems))
    if not found:
        raise LockError(_no_dependencies(path, present) + _misspelt_tables(doc))
    return sorted(found.values(), key=lambda r: r.repo_id)


def _no_dependencies(path: Path, present: list[str]) -> str:
    """The error for a ``pyproject.toml`` that lists no kernel: an empty table is there
    already, so the fix is an entry in it rather than a new table."""
    example = '"kernels-community/relu" = 1'
    if not present:
        return f"{path}: no kernel dependencies; add a [{_TABLES[0]}] table, e.g. {example}"
    if len(present) == 1:
        return f"{path}: [{present[0]}] lists no kernel; add one to it, e.g. {example}"
    tables = " and ".join(f"[{t}]" for t in present)
    return f"{path}: {tables} list no kernel; add one to either, e.g. {example}"


def _misspelt_tables(doc: Mapping[str, Any]) -> str:
    """The tables of ``doc`` that look like a misspelling of a dependency table
    (``[tool.kernelforge.dependecies]``, ``[tool.kernel.dependencies]``), for the error
    of a project that lists no kernel: its kernels are likely there, read by no one."""
    from kernelforge.archs import closest
    from kernelforge.errors import one_line

    tool = doc.get("tool")
    if not isinstance(tool, dict):
        return ""
    meant: list[str] = []
    for name, table in tool.items():
        owner = name if name in ("kernelforge", "kernels") else closest(
            name, ("kernelforge", "kernels"))
        if owner is None or not isinstance(table, dict):
            continue
        for key in table:
            if (key, name) != ("dependencies", owner) and closest(key, ("dependencies",)):
                # a quoted key may hold a line break: the error stays on its one line
                meant.append(f"; [tool.{one_line(name)}.{one_line(key)}] is read by neither "
                             f"tool: did you mean [tool.{owner}.dependencies]?")
    return "".join(meant)
