"""Reports an interpreter's torch installation (and setuptools version) as JSON, for
builds that target it.

Run as ``python -m kernelforge._probe build|system`` by
:mod:`kernelforge.build.interpreter` in another Python environment; it imports only the
standard library, ``kernelforge.variants`` (and torch, for ``system``), so that
environment needs nothing of kernelforge's dependencies. ``build`` answers what every
build asks first, the torch installation and the setuptools version, in one start of the
interpreter.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from kernelforge.variants import detect_system, torch_install_facts


def to_json(value: Any) -> str:
    """JSON of a dataclass of facts (paths as strings)."""
    return json.dumps(dataclasses.asdict(value), default=str)


def _setuptools_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return None


def main(what: str) -> int:
    if what == "build":
        install = torch_install_facts()
        print(json.dumps({"install": None if install is None else dataclasses.asdict(install),
                          "setuptools": _setuptools_version()}, default=str))
    elif what == "system":
        print(to_json(detect_system()))
    else:
        print(f"usage: python -m kernelforge._probe build|system (got {what!r})",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
