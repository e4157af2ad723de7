"""The exceptions of kernelforge's own failures: :class:`KernelforgeError` and its kinds.

Each error carries enough context to act on: the file, the key or argument, what was
expected and how to fix it. The command line turns these into exit codes; library users
catch :class:`KernelforgeError` or one of its subclasses. A bad argument raises
``ValueError`` or ``TypeError`` instead (``archs.UnknownArchError`` is a ``ValueError``),
and a kernel that cannot be imported ``ImportError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

#: What each WARNING that kernelforge logs begins with. A program that set up no logging
#: gets it from Python's last-resort handler as the bare message, without the logger's
#: name, among its own output and other libraries': the prefix says whose it is. The
#: command line writes its warnings as ``warning: <message>`` without it.
WARNING_PREFIX = "kernelforge: "


class KernelforgeError(Exception):
    """Base class of all kernelforge errors.

    Every kernelforge error pickles: one raised in a worker process
    (``multiprocessing``, ``concurrent.futures.ProcessPoolExecutor``) reaches the parent
    with its type, message and attributes (``trace``, ``fix``, ``errors``, ...).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Python rebuilds an exception as ``type(err)(*err.args)``; the errors whose
        # __init__ takes other arguments than their message would fail there. Rebuild
        # from the message and the attributes instead.
        return (_restore, (type(self), self.args), self.__dict__)


def one_line(text: str) -> str:
    """``text`` with each character a terminal would act on (a newline, a carriage
    return, the escape that starts a colour or a title change: whatever is not
    printable) written as its Python escape (``\\n``, ``\\x1b``).

    For names and text that a hub or a file supplies (a file or variant name, a
    revision, a message) shown among kernelforge's own lines: written as they are, they
    could start a line that reads as kernelforge's (``error: ...``), or clear, recolour
    or retitle the terminal.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _restore(cls: type[KernelforgeError], args: tuple[Any, ...]) -> KernelforgeError:
    """An error of type ``cls`` with ``args``, without its ``__init__`` (unpickling)."""
    # An OSError (VariantNotFoundError is a FileNotFoundError) is laid out as one: only
    # OSError's __new__ may make it, and ``cls.__new__`` would find LookupError's first.
    base: Any = OSError if issubclass(cls, OSError) else Exception
    err: KernelforgeError = base.__new__(cls, *args)
    err.args = args
    return err


class ManifestError(KernelforgeError, ValueError):
    """A ``build.toml`` is malformed or names something that does not exist.

    One error may stand for several problems of the same file (a manifest is read to
    its end, so that all its mistakes are reported at once): ``errors`` lists them, and
    the other attributes describe the first.

    Attributes:
        file: the manifest file.
        key: the dotted key at fault (``"kernel.relu.cuda-capabilities"``), or ``None``
            when the whole file is at fault (unreadable, not TOML).
        problem: what is wrong with it.
        expected: what a valid value looks like.
        fix: a concrete suggestion (``did you mean 'cuda-capabilities'?``).
        errors: every problem found, in the order they were found, each a
            :class:`ManifestError` of one problem; ``[self]`` when there is only one.
            With several, the message is ``"<file>: N problems:"`` and one line per
            problem.
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
        self.errors: list[ManifestError] = [self]
        super().__init__(f"{self.file}: {self._detail()}")

    def _detail(self) -> str:
        """The message without the file: ``key 'x': problem; expected ...; fix: ...``,
        on one line whatever a key or value of the file holds (a newline in a quoted
        name would start a line that reads as another problem)."""
        parts = [f"key '{self.key}': {self.problem}" if self.key else self.problem]
        if self.expected:
            parts.append(f"expected {self.expected}")
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return one_line("; ".join(parts))

    @classmethod
    def combine(cls, errors: Iterable[ManifestError]) -> ManifestError:
        """One error for all the problems of ``errors``.

        The problems of each error (its ``errors``) are taken in order; a problem already
        listed (same file, key, problem, expectation and fix) is listed once.

        Args:
            errors: the errors to report together, at least one.

        Returns:
            The only problem itself when there is one, else an error whose attributes
            describe the first problem and whose ``errors`` lists them all.

        Raises:
            ValueError: ``errors`` is empty.
        """
        problems: list[ManifestError] = []
        seen: set[tuple[Path, str | None, str, str | None, str | None]] = set()
        for err in errors:
            for one in err.errors:
                identity = (one.file, one.key, one.problem, one.expected, one.fix)
                if identity not in seen:
                    seen.add(identity)
                    problems.append(one)
        if not problems:
            raise ValueError("ManifestError.combine needs at least one error")
        if len(problems) == 1:
            return problems[0]
        first = problems[0]
        combined = cls(first.file, first.key, first.problem, expected=first.expected,
                       fix=first.fix)
        combined.errors = problems
        lines = [f"{first.file}: {len(problems)} problems:"]
        lines += [f"  - {one._detail()}" if one.file == first.file
                  else f"  - {one.file}: {one._detail()}" for one in problems]
        combined.args = ("\n".join(lines),)
        return combined


class VariantError(KernelforgeError, ValueError):
    """A variant name cannot be parsed, or a backend asked for (``backend=``) is unknown
    or cannot be used by the torch of this process. It is a :class:`ValueError`: both
    are malformed arguments."""


class VariantNotFoundError(KernelforgeError, LookupError, FileNotFoundError):
    """No build variant of a kernel fits this process.

    It is also a :class:`FileNotFoundError`, which Hugging Face's ``kernels`` raises in
    this case, so that code written for it (``except FileNotFoundError:`` to fall back to
    another implementation, as ``transformers`` does) catches it unchanged.

    Args:
        what: the kernel asked for (``"org/name"``, a path), kept as ``what``.
        trace: one line per candidate variant with the reason it was rejected, kept as
            ``trace`` (a list).
        facts: this system in words (:meth:`SystemFacts.describe
            <kernelforge.variants.SystemFacts.describe>`), shown in the message.
        fix: how to load one anyway (the message's last line), kept as ``fix``.
        problem: why nothing could fit, where that is not this system (a version
            branch that holds no build at all), kept as ``problem``: the message then
            says ``<what> <problem>`` instead of "no build variant ... fits this
            system", and no trace or system line, which would say nothing.
    """

    def __init__(self, what: str, trace: Sequence[str], facts: str = "", *,
                 fix: str = "", problem: str = "") -> None:
        self.what = what
        self.trace = list(trace)
        self.fix = fix
        self.problem = problem
        if problem:
            lines = [f"{what} {problem}"] + ([f"fix: {fix}"] if fix else [])
            super().__init__("\n".join(lines))
            return
        lines = [f"no build variant of {what} fits this system"]
        if facts:
            lines.append(f"this system: {facts}")
        if self.trace:
            lines.append("candidates:")
            # a line names a variant (and the archs its metadata lists) as the hub chose
            # them: one line each, whatever they hold (:func:`one_line`)
            lines.extend(f"  {one_line(line)}" for line in self.trace)
        else:
            lines.append(f"{what} holds no build variants (no build/<variant>/ folder)")
        if fix:
            lines.append(f"fix: {fix}")
        super().__init__("\n".join(lines))


class BuildError(KernelforgeError, RuntimeError):
    """Compiling or packaging a kernel failed, or the build cannot start: a backend
    asked for that the project does not have, an ``out_dir`` that cannot hold the
    variants, a package file the build cannot ship."""


class ToolchainError(BuildError):
    """A compiler, SDK or Python environment (``--python``) the build needs is missing or
    unusable."""


class HubError(KernelforgeError, LookupError):
    """A hub repository, revision, variant or file does not exist, cannot be read or
    written, or is refused: a damaged hub or cache entry, a symbolic link where a hub
    holds none, a build unfit to publish. Also a local build path that holds no
    variant, and the Hugging Face Hub without ``huggingface_hub`` installed."""


class NotCachedError(HubError):
    """An offline hub's download cache does not hold what was asked for."""


class IntegrityError(KernelforgeError):
    """Files on disk do not match the digests recorded for them.

    Args:
        where: the directory whose files were checked, kept as ``where`` (a Path).
        problems: one line per changed, missing or extra file, kept as ``problems``.
        what: replaces the message's first line (``refusing to load <where>: ...``),
            for a caller that knows better what the files are.
        fix: what to do about it, the message's last line.
    """

    def __init__(self, where: Path | str, problems: Sequence[str], *, what: str = "",
                 fix: str = "") -> None:
        self.where = Path(where)
        self.problems = list(problems)
        first = what or (f"refusing to load {self.where}: its files do not match their "
                         "recorded digests:")
        # a problem names a file as the hub chose its name: one line each, whatever it holds
        super().__init__("\n".join([first, *(f"  {one_line(p)}" for p in self.problems),
                                     *([fix] if fix else [])]))


class TrustError(KernelforgeError):
    """A kernel is not published by you, not signed by a trusted key and not explicitly
    allowed; or a signature does not verify, or covers no code (a build without digests);
    or a signing key or the trust store cannot be used."""


class SignatureMismatchError(TrustError):
    """A signature by a trusted key does not verify over the ``metadata.json`` it came
    with: one of the two was changed after signing, or damaged on its way (by the hub, a
    proxy, a disk). A load online fetches again, once, the copies of them it took from the
    download cache before it refuses.

    Args:
        message: the refusal, with the fix for what is known of the copies: the
            publisher's (publish again with ``--sign``) for copies as the hub serves them,
            the download cache's (``kernelforge cache remove``) for kept ones offline.
        variant: the build variant whose signature it is, kept as ``variant``.
        problem: what is wrong, without a fix, kept as ``problem`` (the message where not
            given): what a caller that knows where the copies came from restates with
            the fix that fits.
    """

    def __init__(self, message: str, variant: str, *, problem: str = "") -> None:
        super().__init__(message)
        self.variant = variant
        self.problem = problem or message


class UnreadableSignatureError(TrustError):
    """A variant's signature file is not a signature kernelforge can read (not JSON, or a
    field missing or malformed): written so by its publisher, or damaged on its way or in
    the download cache. It is never taken for an unsigned build. A load online fetches
    again, once, a copy it took from the download cache before it refuses.

    Args:
        message: the refusal, with the fix for what is known of the copy (as for
            :class:`SignatureMismatchError`).
        variant: the build variant whose signature it is, kept as ``variant``.
        problem: what is wrong, without a fix, kept as ``problem`` (the message where not
            given).
    """

    def __init__(self, message: str, variant: str, *, problem: str = "") -> None:
        super().__init__(message)
        self.variant = variant
        self.problem = problem or message


class LockError(KernelforgeError):
    """A lock file is missing, malformed, of a newer format, or does not cover the
    requested kernel (with ``lockfile=None``: the calling package's metadata holds none);
    or locking failed: the project's ``pyproject.toml`` or its dependency tables are
    missing or malformed, a lock file cannot be written, or another ``kernelforge lock``
    of the project held its lock too long."""
