"""Every exception kernelforge raises on purpose lives here.

Each error carries enough context to act on: the file, the key or argument, what was
expected and how to fix it. The command line turns these into exit codes; library users
catch :class:`KernelforgeError` or one of its subclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class KernelforgeError(Exception):
    """Base class of all kernelforge errors."""


class ManifestError(KernelforgeError, ValueError):
    """A ``build.toml`` is malformed or names something that does not exist.

    Attributes:
        file: the manifest file.
        key: the dotted key at fault (``"kernel.relu.cuda-capabilities"``), or ``None``
            when the whole file is at fault (unreadable, not TOML).
        expected: what a valid value looks like.
        fix: a concrete suggestion (``did you mean 'cuda-capabilities'?``).
    """

    def __init__(
        self,
        file: Path | str,
        key: str | None,
        problem: str,
        *,
        expected: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.file = Path(file)
        self.key = key
        self.problem = problem
        self.expected = expected
        self.fix = fix
        where = f"{self.file}: key '{key}'" if key else f"{self.file}"
        parts = [f"{where}: {problem}"]
        if expected:
            parts.append(f"expected {expected}")
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__("; ".join(parts))


class VariantError(KernelforgeError, ValueError):
    """A variant name cannot be parsed."""


class VariantNotFoundError(KernelforgeError, LookupError):
    """No build variant of a kernel fits this process.

    ``trace`` holds one line per candidate variant with the reason it was rejected.
    """

    def __init__(self, what: str, trace: Sequence[str], facts: str = "") -> None:
        self.what = what
        self.trace = list(trace)
        lines = [f"no build variant of {what} fits this system"]
        if facts:
            lines.append(f"this system: {facts}")
        if self.trace:
            lines.append("candidates:")
            lines.extend(f"  {line}" for line in self.trace)
        else:
            lines.append("the repository holds no build variants at all")
        super().__init__("\n".join(lines))


class BuildError(KernelforgeError, RuntimeError):
    """Compiling or packaging a kernel failed."""


class ToolchainError(BuildError):
    """A compiler or SDK the build needs is missing or unusable."""


class HubError(KernelforgeError, LookupError):
    """A hub repository, revision or file does not exist or cannot be written."""


class IntegrityError(KernelforgeError):
    """Files on disk do not match the digests recorded for them."""

    def __init__(self, where: Path | str, problems: Sequence[str]) -> None:
        self.where = Path(where)
        self.problems = list(problems)
        super().__init__(
            f"refusing to load {self.where}: its files do not match their recorded digests:\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


class TrustError(KernelforgeError):
    """A kernel is not signed by a trusted key and was not explicitly allowed."""


class LockError(KernelforgeError):
    """A lock file is missing, malformed or does not cover the requested kernel."""
