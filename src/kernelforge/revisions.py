"""Which revision of a kernel repository to load: versions, revisions, redirects.

A load asks for ``version=N`` (branch ``vN``), for ``revision=`` (a branch, a tag or a
commit, or a unique prefix of a commit of at least :data:`MIN_COMMIT_PREFIX` hex digits),
or for neither (the newest ``v<N>`` branch that holds a build: the Hub needs a version's
branch before the commit that fills it, so a publish under way, or one that failed,
leaves a branch without one, which is passed over). Before that, the repository's
``kernel-status.toml`` on ``main`` may redirect it elsewhere, in the format Hugging
Face's ``kernels`` defines::

    kind = "redirect"
    destination = "new-org/new-name"
    revision = "v2"            # optional

The caller's ``version`` or ``revision`` carries over to the destination; the file's
``revision`` applies only when the caller asked for neither (``"main"``, that format's
default, means "the newest version" here, since builds never live on ``main``).
Redirects are followed up to :data:`MAX_REDIRECTS` hops; a cycle is an error.

Every decision is recorded as a line of :attr:`Selection.notes`, which
``kernelforge info`` prints.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from kernelforge.errors import HubError, NotCachedError, VariantNotFoundError
from kernelforge.hub.base import (
    CARD_BRANCH,
    STATUS_FILE,
    VERSION_BRANCH_RE,
    Hub,
    is_commit,
    validate_repo_id,
    version_branches,
)

__all__ = ["MAX_REDIRECTS", "MIN_COMMIT_PREFIX", "Redirect", "Selection", "empty_branch_error",
           "empty_lock_error", "holds_build", "newest_built", "parse_status", "select"]

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5

#: The fewest hex digits a commit prefix needs (:data:`kernelforge.hub.base.PREFIX_RE`).
MIN_COMMIT_PREFIX = 4
_SHORT_PREFIX = re.compile(rf"[0-9a-f]{{1,{MIN_COMMIT_PREFIX - 1}}}")


@dataclass(frozen=True)
class Redirect:
    """A ``kernel-status.toml`` of kind ``redirect``.

    Attributes:
        destination: the repository to load instead.
        revision: the revision it names, or ``None``.
    """

    destination: str
    revision: str | None


@dataclass(frozen=True)
class Selection:
    """The revision chosen for a load.

    Attributes:
        repo_id: the repository loaded (after redirects).
        branch: the branch (``v2``), or ``None`` for a tag or a commit.
        commit: the full commit id.
        notes: the decisions taken, one line each, for people.
    """

    repo_id: str
    branch: str | None
    commit: str
    notes: tuple[str, ...] = ()


def parse_status(text: str, where: str) -> Redirect | None:
    """Read a ``kernel-status.toml``.

    Args:
        text: the file's content.
        where: its location, for messages.

    Returns:
        The :class:`Redirect`, or ``None`` for a status of another kind that needs no
        action (none is defined yet; unknown kinds are errors).

    Raises:
        HubError: the file is not TOML, has no ``kind``, an unknown ``kind``, or a
            redirect without a valid ``destination``.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    from kernelforge._parse import toml_loads

    try:
        doc = toml_loads(text)
    except tomllib.TOMLDecodeError as err:
        raise HubError(f"{where}: not valid TOML ({err})") from err
    kind = doc.get("kind")
    if kind != "redirect":
        raise HubError(f"{where}: key 'kind' is {kind!r}; the only kind known is 'redirect'")
    destination = doc.get("destination")
    try:
        validate_repo_id(destination)
    except ValueError as err:
        raise HubError(f"{where}: key 'destination' must be a repository id 'org/name', "
                       f"got {destination!r}") from err
    revision = doc.get("revision")
    # a branch, tag or commit name holds no space or control character (git refuses them
    # in refs); one that does is no revision, and loads and 'versions' would show it
    if revision is not None and (not isinstance(revision, str) or not revision
                                 or not revision.isprintable()
                                 or any(c.isspace() for c in revision)):
        raise HubError(f"{where}: key 'revision' must be a branch, tag or commit string "
                       f"(no spaces or control characters), got {revision!r}")
    return Redirect(str(destination), revision)


def _branches(hub: Hub, repo_id: str, revision: str | None) -> dict[str, str] | None:
    """``hub.branches(repo_id)``; ``None`` offline for a full commit id when the download
    cache holds no refs of the repository (what ``kernelforge download`` leaves): the
    commit names what to load, as in Hugging Face's loader."""
    try:
        return hub.branches(repo_id)
    except NotCachedError:
        if revision is None or not is_commit(revision.lower()):
            raise
        return None


def _redirect(hub: Hub, repo_id: str, notes: list[str] | None = None, *,
              revision: str | None = None) -> Redirect | None:
    """The redirect ``kernel-status.toml`` on ``main`` names, if any (none followed for a
    full commit id offline with no refs cached, :func:`_branches`)."""
    branches = _branches(hub, repo_id, revision)
    if branches is None:
        if notes is not None:
            notes.append(f"offline, the download cache holds no refs of {repo_id}: commit "
                         f"{str(revision)[:12]} loaded without reading {STATUS_FILE} on main")
        return None
    main = branches.get(CARD_BRANCH)
    if main is None:
        return None
    data = hub.read_file(repo_id, main, STATUS_FILE)
    if data is None:
        return None
    return parse_status(data.decode("utf-8", errors="replace"), f"{repo_id}: {STATUS_FILE}")


#: Why a version branch can hold no file under ``build/``.
_EMPTY_WHY = ("a publish makes a version's branch a moment before the commit that fills it, "
              "so one may be under way, or one that failed or was killed left the branch "
              "behind")


def holds_build(hub: Hub, repo_id: str, commit: str) -> bool:
    """Whether ``commit`` holds any file under ``build/``, where the hub can tell
    (:meth:`HfHub.holds_build <kernelforge.hub.hf.HfHub.holds_build>`, from the file list
    a load reads anyway). A hub without that check is taken to hold one: a local hub
    moves a version branch only to a revision it has written whole, with a build."""
    check = getattr(hub, "holds_build", None)
    return True if check is None else bool(check(repo_id, commit))


def _empty_fix(hub: Hub, repo_id: str, versions: list[int]) -> str:
    """What to do about the version branches ``versions`` if they stay without a build:
    publish again, or delete the branch (with the commands for the Hugging Face Hub)."""
    on_hf = getattr(hub, "kind", None) == "hf"
    publish = f"kernelforge publish PROJECT --repo {repo_id}" + (" --hub hf" if on_hf else "")
    branch = f"v{versions[0]}" if len(versions) == 1 else "BRANCH"
    delete = (f" (hf repos branch delete {repo_id} {branch} --repo-type kernel)" if on_hf
              else "")
    if len(versions) == 1:
        return (f"if branch {branch} stays so, publish version {versions[0]} again "
                f"({publish}) or delete the branch{delete}")
    return (f"for a branch that stays so, publish its version again ({publish}) or delete "
            f"the branch{delete}")


def _named(passed: list[int], versions: dict[int, str]) -> str:
    """The version branches ``passed`` with their revisions: ``v3 (revision c) and ...``."""
    return " and ".join(f"v{n} (revision {versions[n][:7]})" for n in passed)


def _passed_over(hub: Hub, repo_id: str, passed: list[int], versions: dict[int, str]) -> str:
    """The version branches ``passed`` (newest first), which hold no build, in words:
    which, why, and the fix, for a load that takes an older version instead."""
    named = _named(passed, versions)
    if len(passed) == 1:
        which = f"not version {passed[0]}: its branch {named} holds"
    else:
        which = (f"not versions {', '.join(str(n) for n in passed)}: their branches "
                 f"{named} hold")
    return f"{which} no build (no build/ file): {_EMPTY_WHY}; {_empty_fix(hub, repo_id, passed)}"


def newest_built(hub: Hub, repo_id: str, versions: dict[int, str], *,
                 at_least: int | None = None) -> tuple[int, str]:
    """The newest of ``versions`` whose branch holds a build, passing over the newer ones
    whose commit holds no file under ``build/`` (:func:`holds_build`), as a load that
    pins no version and ``kernelforge lock`` of ``">=N"`` choose a version. Where the
    newest holds one, its file list (which the load reads next anyway) is all it reads.

    Args:
        hub: the hub.
        repo_id: the repository.
        versions: ``{N: commit}`` to choose from (not empty).
        at_least: the lowest version ``versions`` was cut to (``kernelforge lock`` of
            ``">=N"``), so that the error where none of them holds a build says "no
            version >= N" rather than that no branch holds one: an older one may.

    Returns:
        ``(version, passed)``: ``passed`` says which newer branches were passed over, why
        and what to do (``"not version 2: its branch v2 ... holds no build ..."``), for a
        WARNING and the notes; ``""`` where none was.

    Raises:
        VariantNotFoundError: no branch of ``versions`` holds a build (the message names
            them, why and what to do).
        HubError: a commit's file list cannot be read.
    """
    passed: list[int] = []
    for n in sorted(versions, reverse=True):
        if holds_build(hub, repo_id, versions[n]):
            return n, _passed_over(hub, repo_id, passed, versions) if passed else ""
        passed.append(n)
    named = _named(passed, versions)
    where = f"the {hub.describe()}" if getattr(hub, "kind", None) == "hf" else hub.describe()
    wanted = "version branch" if at_least is None else f"version >= {at_least}"
    raise VariantNotFoundError(
        f"{repo_id} in {where}", [],
        problem=(f"has no {wanted} that holds a build: {named} "
                 f"{'holds' if len(passed) == 1 else 'hold'} no build (no build/ file); "
                 f"{_EMPTY_WHY}"),
        fix=(f"if a publish is under way, try again once it is done; "
             f"{_empty_fix(hub, repo_id, passed)}"))


def _older_built(hub: Hub, repo_id: str, version: int, commit: str) -> int | None:
    """The newest version older than ``version`` whose branch holds a build, for the fix
    of a load of ``version``, whose ``commit`` holds none; ``None`` where there is none
    or the hub cannot tell now (the error being said comes first)."""
    try:
        older = {n: c for n, c in version_branches(hub.branches(repo_id)).items()
                 if n < version and c != commit}
        for n in sorted(older, reverse=True):
            if holds_build(hub, repo_id, older[n]):
                return n
    except HubError:
        return None
    return None


def empty_branch_error(hub: Hub, repo_id: str, branch: str | None, commit: str
                       ) -> VariantNotFoundError | None:
    """The error of a load (or a lock) of a version branch whose commit holds no file
    under ``build/``: what the branch is, why, and what to do, rather than that no
    variant fits this system.

    Args:
        hub: the hub.
        repo_id: the repository.
        branch: the branch the load took (``v2``), if any.
        commit: its commit.

    Returns:
        The :class:`VariantNotFoundError` (a ``FileNotFoundError``, as Hugging Face's
        loader raises for a revision without the build), or ``None`` where ``branch`` is
        no version branch or the commit holds a file under ``build/``.
    """
    found = VERSION_BRANCH_RE.match(branch or "")
    if found is None or holds_build(hub, repo_id, commit):
        return None
    version = int(found.group(1))
    fix = (f"if a publish is under way, try again once it is done; "
           f"{_empty_fix(hub, repo_id, [version])}")
    older = _older_built(hub, repo_id, version, commit)
    if older is not None:
        fix += (f"; meanwhile version {older} holds a build: load it with version={older} "
                f"(--version {older} on the command line)")
    return VariantNotFoundError(
        f"{repo_id} version {version} (branch {branch}, revision {commit[:7]})", [],
        problem=f"holds no build (no build/ file): {_EMPTY_WHY}", fix=fix)


def empty_lock_error(hub: Hub, repo_id: str, commit: str, what: str
                     ) -> VariantNotFoundError | None:
    """The error of a locked load of a commit that holds no file under ``build/``: a
    ``kernels.lock`` (which pins no variants, so the hub's list of them is all there is)
    written from a version branch between its publish's two steps, rather than that no
    variant fits this system. ``kernelforge lock`` passes over such a branch, or refuses
    it, so its own lock files never pin one.

    Args:
        hub: the hub.
        repo_id: the repository the lock pins (after redirects).
        commit: the commit it pins.
        what: the locked kernel in words (``org/name (locked revision c in kernels.lock)``).

    Returns:
        The :class:`VariantNotFoundError`, or ``None`` where the commit holds a file
        under ``build/``.
    """
    if holds_build(hub, repo_id, commit):
        return None
    return VariantNotFoundError(
        what, [],
        problem=("holds no build (no build/ file): a publish makes a version's branch a "
                 "moment before the commit that fills it, and the lock was written from such "
                 "a branch, while a publish was under way or after one that failed or was "
                 "killed left the branch behind"),
        fix=("lock the project again once the publish is done ('kernelforge lock' passes "
             "over a version branch that holds no build, or says so where the requirement "
             "names that version)"))


def _resolve(hub: Hub, repo_id: str, revision: str) -> str:
    """``hub.resolve``; a revision that is not found and looks like a commit prefix too
    short to be one says how many digits a prefix needs."""
    try:
        return hub.resolve(repo_id, revision)
    except HubError as err:
        if not _SHORT_PREFIX.fullmatch(revision):
            raise
        raise HubError(
            f"{err}; {revision!r} is too short for a commit prefix: a prefix needs at least "
            f"{MIN_COMMIT_PREFIX} hex digits of the commit id ({len(revision)} given), so give "
            "more of them ('kernelforge versions ORG/NAME' lists the commits)") from err


def _offered(hub: Hub, repo_id: str, versions: dict[int, str], main: str | None
             ) -> dict[int, str]:
    """``versions`` less the branches at ``main``'s head where it holds no build (branches
    a publish made, its commit still to come): not offered as a newer version to a load
    of an older one. ``main``'s file list is read already (for its status file), so this
    asks the hub nothing; a branch elsewhere is taken as it is, since telling would. Where
    it cannot be told (offline, main's list not kept), nothing is left out: the remark
    is no reason to fail the load."""
    if main is None or main not in versions.values():
        return versions
    try:
        if holds_build(hub, repo_id, main):
            return versions
    except HubError:
        return versions
    return {n: c for n, c in versions.items() if c != main} or versions


def _pick(
    hub: Hub, repo_id: str, revision: str | None, version: int | None, notes: list[str],
    announce: bool, say_skips: bool,
) -> tuple[str | None, str]:
    """``(branch or None, commit)`` for the selector in one repository; ``announce``: log
    the WARNING lines of a load; ``say_skips``: else, log a WARNING where newer version
    branches that hold no build were passed over (``kernelforge lock``)."""
    branches = _branches(hub, repo_id, revision) or {}
    versions = version_branches(branches)
    if revision is not None:
        commit = _resolve(hub, repo_id, revision)
        branch = revision if revision in branches else None
        kind = "branch" if branch else "revision"
        notes.append(f"revision {revision!r} requested: {kind} {revision} -> commit {commit[:12]}")
        return branch, commit
    if not versions:
        raise HubError(
            f"{repo_id} has no published versions in {hub.describe()} (no v<N> branch; "
            f"branches: {', '.join(branches) or 'none'}); publish one first"
        )
    newest = max(versions)
    if version is None:
        # a branch whose publish has not committed yet (or never will) is passed over:
        # a load says so in its one line below, a lock (say_skips) in a line of its own
        newest, passed = newest_built(hub, repo_id, versions)
        # WARNING level, so that it shows without any logging set up: a load that is
        # not pinned should say what it took.
        if announce:
            # (no command of the command line loads a kernel: the remark is for Python)
            logger.warning(
                "kernelforge: loading %s version %d (branch v%d, revision %s) — pass "
                "version=%d to pin it%s", repo_id, newest, newest, versions[newest][:7],
                newest, f"; {passed}" if passed else "",
            )
        elif passed and say_skips:
            logger.warning("kernelforge: %s: version %d is taken, %s", repo_id, newest, passed)
        if not passed:
            notes.append(f"no version requested: newest version {newest} (branch "
                         f"v{newest}) -> commit {versions[newest][:12]}")
        else:
            notes += [f"no version requested: version {newest} (branch v{newest}), the "
                      f"newest that holds a build -> commit {versions[newest][:12]}",
                      f"version {newest} is taken, {passed}"]
        return f"v{newest}", versions[newest]
    if version not in versions:
        raise HubError(
            f"version {version} of {repo_id} not found in {hub.describe()}; published "
            f"versions: {', '.join(str(v) for v in versions)}"
        )
    notes.append(f"version {version} requested: branch v{version} -> commit "
                 f"{versions[version][:12]}")
    newest = max(_offered(hub, repo_id, versions, branches.get(CARD_BRANCH)))
    if version < newest:
        if announce:
            logger.warning("kernelforge: %s: loading version %d as requested; version %d is "
                           "available (pass version=%d to use it)", repo_id, version, newest,
                           newest)
        notes.append(f"a newer version exists: {newest}")
    return f"v{version}", versions[version]


def select(
    hub: Hub,
    repo_id: str,
    *,
    revision: str | None = None,
    version: int | None = None,
    follow_redirects: bool = True,
    announce: bool = True,
    announce_redirects: bool | None = None,
) -> Selection:
    """Choose the repository, branch and commit a load uses.

    Args:
        hub: where the repository lives.
        repo_id: ``org/name``.
        revision: a branch, a tag or a commit (a unique prefix of at least
            :data:`MIN_COMMIT_PREFIX` hex digits will do).
        version: the major version ``N`` (branch ``vN``); at most one of the two.
            With neither, the newest version whose branch holds a build is used (a
            newer branch whose commit holds no file under ``build/``, which a publish
            under way or one that failed leaves, is passed over: :func:`newest_built`)
            and a WARNING log line says which, and what was passed over; an older
            ``version`` than the newest is logged as a WARNING too.
        follow_redirects: read ``kernel-status.toml`` on ``main`` and follow it.
        announce: log those WARNING lines, which say what a load takes; ``False`` for a
            caller that loads nothing (:func:`kernelforge.kernel_info`), whose
            :attr:`Selection.notes` say the same.
        announce_redirects: log a WARNING for each redirect followed, and one for the
            version branches without a build passed over (``kernelforge lock``, which
            shows no notes, wants them without the lines above); default: ``announce``.

    Returns:
        The :class:`Selection`.

    Raises:
        HubError: the repository, version or revision does not exist (a revision that
            looks like a commit prefix shorter than :data:`MIN_COMMIT_PREFIX` digits is
            said to be too short), a redirect is malformed, or redirects loop.
        VariantNotFoundError: with neither ``version`` nor ``revision``, no version
            branch holds a build.
    """
    notes: list[str] = []
    say_redirects = announce if announce_redirects is None else announce_redirects
    seen = [repo_id]
    while follow_redirects:
        target = _redirect(hub, repo_id, notes, revision=revision)
        if target is None:
            break
        if target.destination in seen or len(seen) > MAX_REDIRECTS:
            raise HubError(f"redirects of {seen[0]} loop or go too deep: "
                           f"{' -> '.join(seen + [target.destination])}")
        if say_redirects:
            logger.warning("kernelforge: %s is redirected to %s (%s on main)", repo_id,
                           target.destination, STATUS_FILE)
        notes.append(f"{repo_id} redirects to {target.destination} ({STATUS_FILE})")
        if revision is None and version is None and target.revision not in (None, "main"):
            revision = target.revision
            notes.append(f"the redirect names revision {revision!r}")
        repo_id = target.destination
        seen.append(repo_id)
    branch, commit = _pick(hub, repo_id, revision, version, notes, announce, say_redirects)
    return Selection(repo_id, branch, commit, tuple(notes))
