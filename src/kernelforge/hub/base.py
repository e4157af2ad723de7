"""What every hub backend offers, and the names and values they share.

A hub holds repositories ``org/name`` laid out like a Hugging Face kernel repository:
builds on branch ``v<version>`` under ``build/<variant>/``, the card on the version
branch and on ``main``. Two backends implement :class:`Hub`: the embedded
:class:`~kernelforge.hub.local.LocalHub` (a directory) and
:class:`~kernelforge.hub.hf.HfHub` (the Hugging Face Hub, through ``huggingface_hub``),
each a subclass of it; a class of the caller's own with the same methods is a hub too.
The loader, the lock files and the command line talk to this protocol only, so one code
path resolves both.

A variant may be signed: its signature lives next to it, at ``build/<variant>.sig``,
so the variant directory itself stays byte for byte what other tools expect (their
digests count every file inside it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from kernelforge._paths import HERE, refuse_empty_path

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.signing import SigningKey

__all__ = [
    "COMMIT_RE",
    "SMALL_FILE_MAX",
    "STATUS_FILE",
    "Fetched",
    "Hub",
    "Revision",
    "check_card",
    "check_publish_arguments",
    "check_ref_name",
    "check_small_file",
    "check_status",
    "check_text",
    "is_commit",
    "is_hub",
    "is_timestamp",
    "signature_path",
    "sigstore_path",
    "spellings",
    "validate_repo_id",
    "version_branches",
]

_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
# \Z, not $: '$' also matches before a trailing newline, which would let "org/name\n",
# "v1\n" or a commit id with a newline through.
REPO_ID_RE = re.compile(rf"^({_PART})/({_PART})\Z")
REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
PREFIX_RE = re.compile(r"^[0-9a-f]{4,40}\Z")
VERSION_BRANCH_RE = re.compile(r"^v(0|[1-9][0-9]*)\Z")

#: The file on ``main`` that can redirect a repository elsewhere.
STATUS_FILE = "kernel-status.toml"
CARD_BRANCH = "main"

#: The most bytes :meth:`Hub.read_file` takes of one file (a ``metadata.json``, a
#: signature, ``kernel-status.toml``, the card). Loads read these before the trust
#: policy has judged anything, so their size is the hub's to choose; a real one is a few
#: kilobytes (a metadata.json lists a digest per file: some 100 bytes each).
SMALL_FILE_MAX = 16 << 20


class Same:
    """An object compared by identity, hashable whatever its class defines, and kept
    alive by whoever holds this: a key for an object that no later one can take (its
    ``id`` cannot be reused while the key exists)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def validate_repo_id(repo_id: object) -> tuple[str, str]:
    """Check a repository id and split it.

    Args:
        repo_id: ``"org/name"``; each part starts and ends with a letter or digit and
            holds only letters, digits, ``.``, ``_`` and ``-`` (at most 96 characters).

    Returns:
        ``(org, name)``.

    Raises:
        ValueError: naming ``repo_id`` and what is wrong with it.
    """
    if not isinstance(repo_id, str):
        raise ValueError(f"repo_id: expected a string 'org/name', got {type(repo_id).__name__}")
    m = REPO_ID_RE.match(repo_id)
    if m is None or ".." in repo_id:
        raise ValueError(
            f"repo_id: {repo_id!r} is not a valid repository id; expected 'org/name' "
            "made of letters, digits, '.', '_' and '-' (e.g. 'kernels-community/relu')"
        )
    return m.group(1), m.group(2)


def check_small_file(repo_id: str, commit: str, path: str, size: int, where: str) -> None:
    """Refuse a file :meth:`Hub.read_file` would read whole that is bigger than
    :data:`SMALL_FILE_MAX`: read into memory before any trust decision, a hub's
    gigabyte ``metadata.json`` would exhaust it.

    Raises:
        HubError: naming the file, its size and the limit.
    """
    if size > SMALL_FILE_MAX:
        from kernelforge.errors import HubError

        raise HubError(
            f"{repo_id} at {commit[:12]} ({where}): {path} is {size} bytes, more than the "
            f"{SMALL_FILE_MAX} such a file may have; refusing to read it (the repository "
            "is damaged or hostile)")


def check_text(name: str, value: object, what: str) -> None:
    """Refuse a value that should be text (a message, a card, a status file).

    Raises:
        ValueError: ``value`` is not a string, naming the argument ``name`` and ``what``
            it should be.
    """
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected {what}, got {type(value).__name__}")


def check_card(card: object) -> None:
    """Refuse a card that is not text, or that is bigger than :data:`SMALL_FILE_MAX`: a
    later publish without a card keeps the branch's by reading it back
    (:meth:`Hub.read_file`), which refuses a file that large, so the card would then be
    dropped from the branch without a word.

    Raises:
        ValueError: naming the argument, with its size and the fix.
    """
    check_text("card", card, "README text")
    _check_readable_size("card", str(card), "",
                         "shorten it (link large images rather than embedding them)")


def check_status(status: object) -> None:
    """Refuse a ``kernel-status.toml`` that is not text, or that is bigger than
    :data:`SMALL_FILE_MAX`: every load of the repository reads it first
    (:meth:`Hub.read_file`), which refuses a file that large, so no load of the
    repository would succeed.

    Raises:
        ValueError: naming the argument, with its size and the fix.
    """
    check_text("status", status, "the text of kernel-status.toml, or None")
    _check_readable_size("status", str(status), " (every load of the repository would be "
                         "refused)", "shorten it (a kernel-status.toml needs a few lines)")


def _check_readable_size(name: str, text: str, consequence: str, fix: str) -> None:
    """Refuse text that, written to a hub as one file, :meth:`Hub.read_file` would refuse
    to read back (over :data:`SMALL_FILE_MAX` bytes as UTF-8)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > SMALL_FILE_MAX:
        raise ValueError(f"{name}: {size} bytes, more than the {SMALL_FILE_MAX} a hub reads "
                         f"of one file{consequence}; fix: {fix}")


def check_publish_arguments(repo_id: object, build_dir: object, version: object,
                            message: object, card: object, signer: object) -> None:
    """Refuse what no hub can publish, before the build is read or the hub written, so
    that both hubs refuse the same arguments the same way. An empty ``build_dir``
    string would be the current directory, whose files the build check then calls
    strays of a ``build/``, a message about the wrong folder.

    Raises:
        ValueError: a malformed ``repo_id``, an empty or blank ``build_dir`` string, a
            ``version`` that is not a non-negative integer, a ``message`` or ``card``
            that is not text, a card over :data:`SMALL_FILE_MAX` (:func:`check_card`).
        TypeError: a ``signer`` that is not a signing key.
    """
    validate_repo_id(repo_id)
    refuse_empty_path(build_dir, "build_dir", "a build", "the project's build/ directory, "
                      f"or the project directory holding it ({HERE})")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version: expected a non-negative integer, got {version!r}")
    check_text("message", message, "a string")
    if card is not None:
        check_card(card)
    if signer is not None and not callable(getattr(signer, "sign_variant", None)):
        raise TypeError(f"signer: expected a SigningKey, got {type(signer).__name__}")


def spellings(folder: Path, name: str, *, files: bool = False) -> list[str]:
    """The names of ``folder``'s subdirectories (its files, with ``files``) that are
    ``name`` (an ASCII repository id part) but for ASCII case, sorted. Names with other
    characters never match, though Python lower-cases some of them to ASCII (the Kelvin
    sign to ``k``). Repository ids ignore case, as on the Hugging Face Hub.
    """
    want = name.lower()
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries
                          if e.name.isascii() and e.name.lower() == want
                          and (e.is_file() if files else e.is_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []


def check_ref_name(kind: str, name: object) -> str:
    """Check a branch or tag name.

    Args:
        kind: what the name is, for the message (``"tag"``).
        name: the name.

    Returns:
        The name.

    Raises:
        ValueError: the name is not letters, digits, ``.``, ``_`` and ``-``.
    """
    if not isinstance(name, str) or not REF_RE.match(name) or name.endswith(".lock"):
        raise ValueError(
            f"{kind}: {name!r} is not a valid name; expected letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


def is_commit(text: object) -> bool:
    """Whether ``text`` is a full 40-hex commit id."""
    return isinstance(text, str) and COMMIT_RE.match(text) is not None


def version_branches(branches: dict[str, str]) -> dict[int, str]:
    """The kernel versions among branches: ``{"v1": c1, "main": c0}`` -> ``{1: c1}``.

    Args:
        branches: ``{branch: commit}``.

    Returns:
        ``{N: commit}`` for every branch ``v<N>``, sorted by ``N``.
    """
    out = {}
    for branch, commit in branches.items():
        m = VERSION_BRANCH_RE.match(branch)
        if m:
            out[int(m.group(1))] = commit
    return dict(sorted(out.items()))


def signature_path(variant: str) -> str:
    """Where a variant's signature lives in a revision: ``build/<variant>.sig``."""
    return f"build/{variant}.sig"


def sigstore_path(variant: str) -> str:
    """Where a variant's sigstore bundle lives in a revision (Hugging Face's layout):
    ``build/<variant>/metadata.json.sigstore``."""
    return f"build/{variant}/metadata.json.sigstore"


@dataclass(frozen=True)
class Revision:
    """One published revision of a hub repository.

    Attributes:
        repo_id: the repository.
        commit: the 40-hex commit id.
        branch: the branch it was published on (``v1``, ``main``).
        parent: the commit the branch pointed to before, or ``None``.
        time: publication time, seconds since the epoch.
        message: the publish message.
        variants: the build variants it holds.
    """

    repo_id: str
    commit: str
    branch: str
    parent: str | None
    time: float
    message: str
    variants: tuple[str, ...] = field(default_factory=tuple)

    @property
    def short(self) -> str:
        """The first 7 hex digits of the commit id."""
        return self.commit[:7]

    @property
    def when(self) -> datetime:
        """Publication time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time, tz=timezone.utc)


def is_timestamp(value: object) -> TypeGuard[float]:
    """Whether ``value``, read from a record, is a time in seconds since the epoch that
    a date can be given for (:attr:`Revision.when`): a number, not a bool, not NaN or
    infinite, not beyond the year 9999."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return False
    return True


@dataclass(frozen=True)
class Fetched:
    """A variant's files, on this machine, with what the hub recorded about them.

    Attributes:
        path: the variant directory (holds ``metadata.json`` and the package).
        recorded: ``{relpath: base64 sha256}`` of every file of the variant,
            ``metadata.json`` included, as recorded when it was published (local hub)
            or downloaded and checked (download cache); ``None`` when nothing was.
        owned: published to a local hub by this user (see :mod:`kernelforge.trust`).
        fetched: downloaded by this call (``False`` when it was already on disk).
    """

    path: Path
    recorded: dict[str, str] | None
    owned: bool = False
    fetched: bool = False


@runtime_checkable
class Hub(Protocol):
    """A place kernel repositories are published to and loaded from.

    ``kind`` is ``"local"`` or ``"hf"``. Commits are 40-hex ids; variant names are the
    directory names under ``build/``.
    """

    kind: str

    def describe(self) -> str:
        """One line for people: ``local hub /path`` or ``Hugging Face Hub``."""
        ...

    def has_repo(self, repo_id: str) -> bool:
        """Whether the repository exists (here, or in the download cache offline)."""
        ...

    def branches(self, repo_id: str) -> dict[str, str]:
        """``{branch: commit}``; raises ``HubError`` when the repository is missing."""
        ...

    def tags(self, repo_id: str) -> dict[str, str]:
        """``{tag: commit}``."""
        ...

    def resolve(self, repo_id: str, revision: str) -> str:
        """A branch, tag or (prefix of a) commit -> the full commit id."""
        ...

    def variants(self, repo_id: str, commit: str) -> list[str]:
        """The variant names under ``build/`` at a commit, sorted."""
        ...

    def read_file(self, repo_id: str, commit: str, path: str) -> bytes | None:
        """One small file of a revision (``build/<v>/metadata.json``), ``None`` if absent;
        one bigger than :data:`SMALL_FILE_MAX` is a ``HubError``."""
        ...

    def fetch_variant(
        self, repo_id: str, commit: str, variant: str, *, refresh: bool = False
    ) -> Fetched:
        """Make a variant's files available on disk (``refresh``: fetch them again)."""
        ...

    def publish(
        self,
        repo_id: str,
        build_dir: str | os.PathLike[str],
        *,
        version: int,
        message: str = "",
        card: str | None = None,
        signer: SigningKey | None = None,
    ) -> Revision:
        """Publish a ``build/`` directory as a new revision on branch ``v<version>``."""
        ...


def is_hub(obj: object) -> TypeGuard[Hub]:
    """``isinstance(obj, Hub)``, with the same answer on every Python kernelforge runs on.

    From Python 3.12 on, ``isinstance`` against a protocol no longer counts what an object
    provides through ``__getattr__`` (a wrapper around a hub, a proxy); Python 3.10 and
    3.11 do. A hub of the caller's own class that works on one is taken on all of them.
    """
    if isinstance(obj, Hub):
        return True
    members = getattr(Hub, "__protocol_attrs__", None)  # Python >= 3.12
    return (members is not None and not isinstance(obj, type)
            and all(hasattr(obj, name) for name in members))
