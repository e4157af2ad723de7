"""``kernelforge init``: a new kernel project in the guide's layout, made from the bundled
relu example with the kernel's name substituted."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kernelforge.errors import KernelforgeError

TEMPLATE = Path(__file__).with_name("examples") / "relu"
_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")


def init_project(name: str, directory: Path | None = None) -> Path:
    """Create a project for kernel ``name`` with a working relu-style op for cpu and cuda.

    Args:
        name: kernel name (``^[a-z][-a-z0-9]*[a-z0-9]$``); the Python package and op use
            it with ``-`` replaced by ``_``.
        directory: where to create the project (default: ``./<name>``); must not exist
            or be empty.

    Returns:
        The project directory.
    """
    if not _NAME.match(name):
        raise KernelforgeError(
            f"invalid kernel name {name!r}: use lowercase letters, digits and '-', starting "
            "with a letter and ending with a letter or digit (e.g. 'my-relu')"
        )
    dest = Path(directory) if directory is not None else Path(name)
    if dest.exists() and any(dest.iterdir()):
        raise KernelforgeError(f"{dest} exists and is not empty; choose another directory")
    python_name = name.replace("-", "_")
    for path in sorted(TEMPLATE.rglob("*")):
        rel = path.relative_to(TEMPLATE)
        if "__pycache__" in rel.parts or rel.parts[0] in ("build", ".kernelforge"):
            continue
        target = dest / Path(*(p.replace("relu", python_name) for p in rel.parts))
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.name == "build.toml":
            # The kernel name keeps its dashes; every other use is the Python name.
            text = path.read_text().replace('name = "relu"', 'name = "\0"')
            text = text.replace("relu", python_name).replace('name = "\0"', f'name = "{name}"')
            # The example's hub repository is not the new kernel's: publish takes --repo.
            text = re.sub(r"\n\[general\.hub\]\n[^\[]*", "\n\n", text)
            target.write_text(text)
        elif path.suffix in {".py", ".cpp", ".h", ".cu", ".toml", ".md"}:
            target.write_text(path.read_text().replace("relu", python_name))
        else:
            shutil.copyfile(path, target)
    return dest
