"""Reports an interpreter's torch installation (and setuptools version) as JSON, for
builds that target it.

Run as ``python -m kernelforge._probe install|system|setuptools`` by
:mod:`kernelforge.build.interpreter` in another Python environment; it imports only the
standard library, ``kernelforge.variants`` (and torch, for ``system``), so that
environment needs nothing of kernelforge's dependencies.
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


def main(what: str) -> int:
    if what == "install":
        install = torch_install_facts()
        print("null" if install is None else to_json(install))
    elif what == "system":
        print(to_json(detect_system()))
    elif what == "setuptools":
        from importlib import metadata

        try:
            print(json.dumps({"version": metadata.version("setuptools")}))
        except metadata.PackageNotFoundError:
            print("null")
    else:
        print(f"usage: python -m kernelforge._probe install|system|setuptools (got {what!r})",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
