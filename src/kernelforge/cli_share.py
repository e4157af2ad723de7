"""The sharing and trust subcommands of ``kernelforge``: info, lock, download, cache,
keygen and trust. A thin layer like :mod:`kernelforge.cli`, which registers them and turns
kernelforge errors into exit code 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from kernelforge.errors import KernelforgeError, one_line

__all__ = ["add_commands", "allow_arg", "backend_arg", "hub_arg", "hub_from_args",
           "key_file_arg", "key_label_arg", "key_name_arg", "load_signer", "pattern_arg",
           "public_key_arg", "refuse_empty", "repo_arg", "revision_arg", "version_arg"]

HUB_HELP = ("a local hub directory, or 'hf' for the Hugging Face Hub (default: "
            "$KERNELFORGE_HUB, else the local hub when it holds the repository, else hf)")
#: ``--hub`` of the commands that read a lock file: with none given, a lock entry's
#: recorded kind of hub decides, not ``$KERNELFORGE_HUB`` (:func:`kernelforge.locate.hub_for_lock`).
LOCKED_HUB = ("the kind of hub the lock records for each kernel: hf, or the local hub "
              "($KERNELFORGE_HUB when it names a directory, else the user cache's); a "
              "kernels.lock records none: hf when $KERNELFORGE_HUB is hf, else the local hub "
              "when it holds the locked commit, else hf")
INFO_HUB_HELP = HUB_HELP[:-1] + f"; with --lock: {LOCKED_HUB})"
DOWNLOAD_HUB_HELP = ("a local hub directory, or 'hf' for the Hugging Face Hub (default: "
                     f"{LOCKED_HUB})")


def repo_arg(text: str) -> str:
    """argparse type for ``org/name`` arguments."""
    from kernelforge.hub.base import validate_repo_id

    try:
        validate_repo_id(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return text


def allow_arg(text: str) -> str:
    """argparse type for ``--allow``: a repository id. A pattern (``org/*``) is refused
    saying where patterns go, as ``trust_remote_code=[...]`` refuses one in Python
    (:func:`kernelforge.policy.allow_key`): the trust store's allow list."""
    from kernelforge.trust import pattern_problem

    if "*" in text:
        if pattern_problem(text):
            return repo_arg(text)  # not a pattern either: the repository id's message
        fix = ("to allow every repository for this command, pass --trust-remote-code "
               "instead; to allow them for every load, add it to your trust store with: "
               if text == "*" else "to allow every repository the pattern matches, add it "
               "to your trust store with: ")
        raise argparse.ArgumentTypeError(
            f"{text!r} is a pattern, but --allow takes repository ids ('org/name'), each "
            f"allowed as written; {fix}kernelforge trust allow {shlex.quote(text)}")
    return repo_arg(text)


def pattern_arg(text: str) -> str:
    """argparse type for repository patterns: ``org/name``, ``org/*`` or ``*``
    (:func:`kernelforge.trust.pattern_problem`, which the trust functions apply too)."""
    from kernelforge.trust import pattern_problem

    problem = pattern_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def refuse_empty(text: str, what: str, give: str, *,
                 would: str = "mean the current directory") -> str:
    """``text`` as given, unless it is empty or blank (typically ``"$UNSET_VARIABLE"``),
    which an argparse type refuses: read as given, it would mean the current directory
    or the option left out. The words are the library's for its own path arguments
    (:func:`kernelforge._paths.empty_path_why`); ``give`` says what to pass instead,
    ``would`` what the empty path would do."""
    from kernelforge._paths import blank_name_hint, empty_path_why, is_empty_path

    if is_empty_path(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: {empty_path_why(what, give, would=would)}{blank_name_hint(text)}")
    return text


def hub_arg(text: str) -> str:
    """argparse type for ``--hub``: a directory or ``hf``, never empty. The refusal says
    what the library's (:func:`kernelforge.hub.local.empty_hub`, for ``hub=""``) says,
    in the command line's words: leave ``--hub`` out, not ``None``, for the default that
    each command's ``--help`` names (a load's and a publish's differ)."""
    from kernelforge.hub.local import EMPTY_HUB_GIVE

    return refuse_empty(text, "a hub", f"{EMPTY_HUB_GIVE}, or leave --hub out for the "
                                       "default hub (--help says which)")


def lock_arg(text: str) -> str:
    """argparse type for ``info --lock``: a lock file, never empty. The refusal says what
    the library's (:data:`kernelforge.lock.EMPTY_LOCK_WHY`, for ``lockfile=""``) says,
    in the command line's words."""
    from kernelforge.lock import EMPTY_LOCK_GIVE

    return refuse_empty(text, "a lock file", f"{EMPTY_LOCK_GIVE}, or leave --lock out to "
                                             "describe what a load picks without a lock")


def lock_path_arg(text: str) -> str:
    """argparse type for ``download``'s PATH: a lock file or project, never an empty
    string. Left out it is the current directory (its default, ``.``); given empty it is
    refused, as ``--lock ''`` is."""
    from kernelforge.lock import EMPTY_LOCK_GIVE

    return refuse_empty(text, "a lock file", EMPTY_LOCK_GIVE)


def lock_project_arg(text: str) -> str:
    """argparse type for ``lock``'s PATH: a project, never an empty string (which would
    lock, and write the lock files of, whatever project the current directory holds);
    the library's refusal (``lock_project("")``) in the same words."""
    from kernelforge.lock._pin import LOCK_PROJECT_GIVE

    return refuse_empty(text, "a project", LOCK_PROJECT_GIVE)


def backend_arg(text: str) -> str:
    """argparse type for ``info`` and ``download``'s ``--backend``: a backend's name. An
    unknown one is bad usage, said naming the option; whether torch here supports a
    known one is the command's to say."""
    from kernelforge.variants import BACKENDS, _unknown_backend

    if text not in BACKENDS:
        raise argparse.ArgumentTypeError(_unknown_backend(text))
    return text


#: ``trust add-sigstore --issuer``'s default: :data:`kernelforge.trust.GITHUB_ISSUER`
#: (not imported: building the parser imports nothing it does not need).
_GITHUB_ISSUER = "https://token.actions.githubusercontent.com"

_KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def key_label_arg(text: str) -> str:
    """argparse type for ``keygen --name`` and ``trust add --name``: the key's label in
    the trust store, one line that ``kernelforge trust list`` prints as it is
    (:func:`kernelforge.trust.key_name_problem`, which ``add_key`` applies too). For
    ``keygen`` with ``--out`` that is all it is; without, it names the key file too,
    which :func:`key_name_arg` checks once all arguments are known."""
    from kernelforge.trust import key_name_problem

    problem = key_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def key_name_arg(text: str) -> str:
    """Check a ``keygen --name`` that names the file ``keys/NAME.pem`` (no ``--out``):
    only letters, digits, ``.``, ``_`` and ``-`` (no ``/``, no leading ``.``, no
    spaces), so it cannot point out of ``keys/``."""
    if not _KEY_NAME.match(text) or text.endswith((".pem", ".pub")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a key name; use 1 to 64 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit and not ending in .pem or .pub (it names the "
            "file keys/NAME.pem in the config directory; pass --out FILE to write elsewhere, "
            "and the name is then only a label)"
        )
    return text


def key_file_arg(text: str) -> str:
    """argparse type for ``keygen --out``: a file, never empty. An empty one would read
    as no ``--out`` at all, and the key would go to ``keys/NAME.pem`` in the config
    directory, replacing the default key with ``--force``."""
    return refuse_empty(text, "a key file", "the private key's file path, or leave --out "
                        "out for keys/NAME.pem in the config directory",
                        would="read as --out left out")


def _check_keygen_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Without ``--out`` the name is a file name in ``keys/``: refuse one that is not,
    as a usage error (exit 2) like the other argument checks."""
    if args.out is None:
        try:
            key_name_arg(args.name)
        except argparse.ArgumentTypeError as err:
            parser.error(f"argument --name: {err}")


def _check_sigstore_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``trust add-sigstore``'s identity and issuer, checked together (an empty identity
    and a plain http issuer are said in one message): a malformed one is a usage error
    (exit 2) like the other argument checks."""
    from kernelforge.trust import _check_identity

    try:
        _check_identity(args.identity, args.issuer)
    except KernelforgeError as err:
        parser.error(str(err))


def _is_key_text(spec: str) -> bool:
    """Whether ``trust add``'s key is given as ``ed25519:<base64>`` (surrounding space
    ignored, as a key file's is), not as a key file: the argument check and the command
    decide it alike."""
    return spec.strip().startswith("ed25519:")


def public_key_arg(text: str) -> str:
    """argparse type for ``trust add``'s key: ``ed25519:<base64>`` that does not read as
    a key is bad usage, and so is an empty one (a key file's path from an unset
    variable); anything else names a key file, read by the command."""
    from kernelforge.signing import PublicKey

    refuse_empty(text, "a public key file", "the publisher's public key, 'ed25519:<base64>', "
                 "or its .pub file")
    if _is_key_text(text):
        try:
            PublicKey.parse(text)
        except KernelforgeError as err:
            raise argparse.ArgumentTypeError(str(err)) from err
    return text


def revision_arg(text: str) -> str:
    """argparse type for ``--revision``: a branch, tag or commit (not empty)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a revision; expected a branch, tag or commit, e.g. v1"
        )
    return text


def version_arg(text: str) -> int:
    """argparse type for ``--version``: a major version, a non-negative integer."""
    try:
        version = int(text)
    except ValueError:
        version = -1
    if version < 0:
        # the branch's name given for its version (v1 for 1)
        branch = text[:1] in ("v", "V") and text[1:].isdigit()
        example = text[1:] if branch else "1"
        hint = f" (the branch v{example} holds version {example})" if branch else ""
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a version; expected a non-negative integer, e.g. {example}{hint}"
        )
    return version


def hub_from_args(args: argparse.Namespace) -> Any:
    """The hub named by ``--hub`` (``None``: the default for the command)."""
    from kernelforge.hub import as_hub

    hub = getattr(args, "hub", None)
    return as_hub(hub) if hub is not None else None


def load_signer(spec: str) -> Any:
    """A signing key from ``--sign``: a key file, or a key name in the config directory.

    A name (no ``/``) that is no file here names ``keys/NAME.pem`` in the config
    directory; ``NAME.pem`` that is no file here names ``keys/NAME.pem`` too, with a
    note saying so. "No file" means no regular file: a directory of that name (a
    project folder called like the key, say) is passed over just as a missing one. A
    key that cannot be found is refused naming the ``keys/NAME.pem`` looked for and
    the keys that are there.

    Args:
        spec: a path to a PEM private key, or the name given to ``kernelforge keygen``.

    Returns:
        The :class:`~kernelforge.signing.SigningKey`.

    Raises:
        TrustError: no such key (naming the keys in ``keys/``), or the key cannot be
            read or used (:func:`~kernelforge.signing.load_signing_key`).
    """
    from kernelforge.errors import TrustError
    from kernelforge.signing import load_signing_key
    from kernelforge.trust import config_dir

    path = here = Path(os.path.expanduser(spec))
    keys = config_dir() / "keys"
    name = spec[:-len(".pem")] if spec.endswith(".pem") else spec
    in_keys = keys / f"{name}.pem"
    bare = "/" not in spec and bool(name)
    # what is here instead of a key file, for messages ("" when nothing is)
    other = ("" if here.is_file() or not (here.exists() or here.is_symlink())
             else "a directory" if here.is_dir() else "a special file" if here.exists()
             else "a broken link")
    if bare and not here.is_file():
        path = in_keys
        if spec.endswith(".pem") and in_keys.exists():  # a file name meant here: say so
            there_is = f"{spec} here is {other}" if other else f"there is no file {spec} here"
            print(f"note: {there_is}; signing with the key {in_keys}", file=sys.stderr)
    if path.exists() or path.is_symlink():
        return load_signing_key(path)  # its own errors: unreadable, not a key, chmod
    try:
        names = sorted(f.stem for f in keys.iterdir()
                       if f.suffix == ".pem" and not f.name.startswith("."))
    except OSError:
        names = []
    if not bare:
        looked = f"{path} does not exist"
    elif other:
        looked = f"{spec} here is {other}, not a key file, and there is no {in_keys}"
    else:
        looked = f"no file {spec} here and no {in_keys}"
    there = (f"the keys in {keys} are: {', '.join(names)}; pass one of those names, or a "
             "key file's path" if names else f"there are no keys in {keys}")
    create = ("kernelforge keygen" + (f" --name {name}" if _KEY_NAME.match(name)
                                      and not name.endswith(".pub") else ""))
    raise TrustError(f"--sign {spec}: {looked}; {there} (create a key with '{create}')")


def _allow(args: argparse.Namespace) -> bool | list[str]:
    if args.trust_remote_code:
        return True
    return list(args.allow or [])


def _check_local_kernels(repo: str | None = None) -> None:
    """A malformed ``LOCAL_KERNELS`` is the user's to fix: an error line, not a traceback.
    With ``repo``, entries that name it only in other cases, with different paths, too."""
    from kernelforge.locate import LOCAL_KERNELS_ENV, _override, local_overrides

    try:
        overrides = local_overrides()
        if repo is not None:
            _override(overrides, repo)
    except ValueError as err:
        raise KernelforgeError(f"{err}; fix: correct {LOCAL_KERNELS_ENV} or unset it") from err


def _cmd_info(args: argparse.Namespace) -> int:
    from kernelforge.loader import kernel_info

    _check_local_kernels(args.repo)

    info = kernel_info(args.repo, revision=args.revision, version=args.version,
                       backend=args.backend, hub=hub_from_args(args),
                       trust_remote_code=_allow(args), lockfile=args.lock)
    local = info.source == "local"  # a LOCAL_KERNELS override: no hub, no revision
    print(f"repository: {info.repo}")
    print(f"hub:        {_local_override_words(info.repo) if local else info.hub or '-'}")
    print(f"branch:     {info.branch or '-'}")
    print(f"commit:     {info.commit or '-'}")
    # what the hub chose (variant names, the archs a metadata.json lists, a redirect's
    # revision) is shown one line each, escaped: it cannot fake a line of this report
    print(f"variant:    {one_line(info.variant)} (module {one_line(info.id)})")
    print(f"path:       {info.path or '(not downloaded yet)'}")
    if local:
        print("revision:   - (a local build: its directory's files as they are now)")
        for note in info.notes:  # a version= its metadata does not record
            print(f"  note: {one_line(note)}")
    elif not info.notes:
        print("revision:   -")
    else:
        print("revision:")
        for note in info.notes:
            print(f"  {one_line(note)}")
    print("variants:")
    for line in info.trace:
        print(f"  {one_line(line)}")
    if local:
        # loader._load_plan: a plan without a hub loads its path with no trust decision
        print("trust: not checked, a local build is loaded without the trust policy (it "
              "applies to kernels from a hub; --trust-remote-code and --allow are not "
              "needed)")
        return 0
    print(one_line(_trust_words(info.trust)))
    # A load that the trust policy would refuse fails: so does this, after saying why
    # and how to let it load, as the load's own error does. A refusal that no trust or
    # allowance lifts (a damaged hub, a tampered signature, a build copied to another
    # version's branch) says its own fix.
    if info.trust.startswith("trust: refused"):
        from kernelforge.policy import NOT_ALLOWED, key_fix

        if info.trust.startswith(f"trust: refused, {NOT_ALLOWED}"):
            org = info.repo.split("/")[0]
            print(f"to load it: {key_fix(info.trust, f'{org}/*')}, allow the repository "
                  f"(kernelforge trust allow {info.repo}), or allow it for one command "
                  f"(--trust-remote-code, or --allow {info.repo})")
        # the failure on stderr too, as every failure is: for a script that keeps that
        # stream (or reads the report's lines off stdout)
        print(f"error: a load of {info.repo} (variant {one_line(info.variant)}) would be "
              f"{one_line(info.trust.removeprefix('trust: '))}", file=sys.stderr)
        return 1
    return 0


def _local_override_words(repo: str) -> str:
    """``LOCAL_KERNELS (<path>)``: where the override for ``repo`` points."""
    from kernelforge.locate import LOCAL_KERNELS_ENV, _override, local_overrides

    path = _override(local_overrides(), repo)
    return f"{LOCAL_KERNELS_ENV} ({path})" if path is not None else LOCAL_KERNELS_ENV


#: The trust policy's reasons that name ``trust_remote_code`` (kernelforge.policy), as
#: the command line says them: the options the user passed.
_TRUST_OPTIONS = {
    "trust: allowed by trust_remote_code=True": "trust: allowed by --trust-remote-code",
    "trust: allowed by the trust_remote_code list": "trust: allowed by --allow",
}


def _trust_words(trust: str) -> str:
    """The trust decision in words, naming the options rather than Python's arguments."""
    for said, cli in _TRUST_OPTIONS.items():
        if trust == said or trust.startswith(f"{said};"):
            return cli + trust[len(said):]
    return trust


def _cmd_lock(args: argparse.Namespace) -> int:
    from kernelforge.lock import describe_dependency, lock_project

    result = lock_project(args.path, hub=hub_from_args(args), allow=_allow(args))
    for k in result.kernels:
        where = f"branch {k.branch}, " if k.branch else ""
        print(f"{k.repo_id}: {where}commit {k.commit[:12]} ({k.hub}), "
              f"{_variants(k.variants)}")
        for key, dep in (k.depends or {}).items():
            where = f"branch {dep.branch}, " if dep.branch else ""
            print(f"  needs {describe_dependency(key)}: {where}commit {dep.commit[:12]} "
                  f"({dep.hub}), {_variants(dep.variants)}")
    print(f"wrote {result.path}" + (f" and {result.hf_path}" if result.hf_path else ""))
    return 0


def _variants(variants: Any) -> str:
    count = len(variants or {})
    return f"{count} variant{'' if count == 1 else 's'}"


def _cmd_download(args: argparse.Namespace) -> int:
    from kernelforge.lock import DownloadProgress, download_locked, read_lock

    _check_local_kernels()  # a kernel-depends the lock leaves unpinned reads it
    lock = read_lock(args.path)
    if not lock.kernels:  # as 'cache clear' of an empty cache: said, and not an error
        print(f"nothing is locked in {lock.path}; nothing to download")
        return 0
    progress = DownloadProgress()
    try:
        fetched = download_locked(lock.path, hub=hub_from_args(args),
                                  all_variants=args.all_variants, backend=args.backend,
                                  progress=progress)
    except KernelforgeError as err:
        if not progress.fetched and not progress.skipped:
            raise
        # what a partial download did: the variants it fetched stay in the cache
        said = _by_kernel([(r, v) for r, v, _path in progress.fetched]) or "none"
        skipped = (f"skipped (a load refuses them, and this machine loads none of them): "
                   f"{_by_kernel([(r, v) for r, v, _why in progress.skipped])}; "
                   if progress.skipped else "")
        raise KernelforgeError(
            f"{err}\nalready fetched and verified: {said}; {skipped}"
            f"not fetched: {', '.join(progress.left) or 'none'}"
        ) from err
    for repo_id, variant, path in fetched:
        print(f"{repo_id} {variant}: verified -> {path}")
    for repo_id, variant, why in progress.skipped:
        print(f"{repo_id} {variant}: skipped, not fetched: {why}")
    return 0


def _by_kernel(variants: list[tuple[str, str]]) -> str:
    """``org/a (v1, v2), org/b (v1)``: variants listed by kernel, in the order given."""
    done: dict[str, list[str]] = {}
    for repo_id, variant in variants:
        done.setdefault(repo_id, []).append(variant)
    return ", ".join(f"{r} ({', '.join(v)})" for r, v in done.items())


def _replaced_keys(path: Path, pub_file: Path) -> list[Any]:
    """The public keys of the key file ``keygen --force`` is about to replace: from the
    private key, then from its ``.pub`` file, each once; none where neither can be read.

    The ``.pub`` counts as well: ``keygen`` writes it last, so a ``keygen --force`` that
    was interrupted (Ctrl-C, a kill) after putting its new private key in place leaves
    there the key it was replacing, which may still be in the trust store."""
    from kernelforge.signing import PublicKey, load_signing_key

    found = []
    try:
        found.append(load_signing_key(path).public)
    except KernelforgeError:
        pass  # unreadable or not ed25519: the .pub next to it may still say which key it was
    try:
        public = PublicKey.parse(pub_file.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError, KernelforgeError):
        pass
    else:
        if public.key_id not in {k.key_id for k in found}:
            found.append(public)
    return found


def _key_exists(path: Path) -> KernelforgeError:
    """``keygen``'s refusal of a key file that exists, without ``--force``."""
    return KernelforgeError(
        f"{path}: a key already exists; pass --force to replace it (the replaced key is "
        "then removed from your trust store), or choose another --name or --out"
    )


def _cmd_keygen(args: argparse.Namespace) -> int:
    from kernelforge import signing, trust
    from kernelforge.errors import TrustError

    path = Path(os.path.expanduser(args.out)) if args.out else (
        trust.config_dir() / "keys" / f"{args.name}.pem")
    pub_file = path.with_suffix(".pub")
    repos = list(args.repo or ["*"])
    # Every refusal comes before anything is written.
    if path.is_dir():
        raise KernelforgeError(
            f"--out {path} is a directory; give the key's file path, e.g. --out "
            f"{shlex.quote(str(path / 'NAME.pem'))}"
        )
    try:  # a file above it leaves no folder to write in: signing says so, naming it
        if args.out:
            signing._check_key_path(path)
        else:  # the default place, in the configuration directory
            signing._check_key_path(path, fix=f"set {trust.CONFIG_ENV} to a directory, or "
                                              "give the key's path with --out")
    except TrustError as err:
        raise KernelforgeError(f"--out {err}" if args.out else str(err)) from None
    if path.suffix == ".pub":
        raise KernelforgeError(
            f"--out {path}: the private key file must not end in .pub (the public key is "
            f"written next to it as NAME.pub and would overwrite it); pass e.g. "
            f"--out {shlex.quote(str(path.with_suffix('.pem')))}"
        )
    import filelock

    _keygen_state(args, path, pub_file)  # refused before the lock's folder and file exist
    # One keygen of a key file at a time: two at once (--force) would leave the private
    # key of one beside the public key of the other, and both trusted.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(path.with_name(f".{path.name}.lock")), timeout=60)
        lock.acquire()
    except TimeoutError:
        raise  # another keygen holds it: not the file system's refusal
    except OSError as err:
        raise _key_write_error(err, path) from err
    try:
        # A keygen killed before its renames left a temporary of the key file (a private
        # key) or of its .pub; under this lock no other keygen is writing one.
        from kernelforge._durable import remove_temp_leftovers

        for written in (path, pub_file):
            remove_temp_leftovers(written, "'kernelforge keygen'")
        return _keygen(args, path, pub_file, repos)
    finally:
        lock.release()


def _key_write_error(err: OSError, path: Path) -> KernelforgeError:
    """``keygen``'s error for a key file it cannot write (a folder one may not write, a
    full disk), which the system names by a folder or a temporary file, or not at all."""
    from kernelforge import trust

    return trust.config_write_error(err, path, "the new key", "no key was written")


def _keygen_state(args: argparse.Namespace, path: Path, pub_file: Path
                  ) -> tuple[bool, list[Any], Any]:
    """What ``keygen`` finds, or its refusal: whether it replaces a key file, the
    replaced public keys (:func:`_replaced_keys`; none: unreadable) and the trust store
    it will change (``None``: none; a malformed one is refused before any key is
    written)."""
    from kernelforge import trust

    if path.exists() and not args.force:
        raise _key_exists(path)
    if pub_file.exists() and not path.exists() and not args.force:
        raise KernelforgeError(
            f"{pub_file}: exists and would be overwritten by the new public key; move it "
            "away, choose another --out, or pass --force to replace it"
        )
    replacing = path.exists()
    old = _replaced_keys(path, pub_file) if replacing else []
    store = None
    if not args.no_trust or old:
        store = trust.load_store()
    return replacing, old, store


def _keygen(args: argparse.Namespace, path: Path, pub_file: Path, repos: list[str]) -> int:
    """``keygen`` past the checks of its arguments, under the key file's lock."""
    from kernelforge import trust
    from kernelforge._durable import replace_file
    from kernelforge._paths import path_word
    from kernelforge.errors import TrustError
    from kernelforge.signing import generate_key

    replacing, old, store = _keygen_state(args, path, pub_file)
    try:
        key = generate_key(path, overwrite=args.force)
    except OSError as err:
        raise _key_write_error(err, path) from err
    except TrustError as err:
        # Another keygen wrote the file since the check above: it keeps its key, and
        # nothing is written or trusted for this one.
        if args.force or not (path.exists() or path.is_symlink()):
            raise
        raise _key_exists(path) from err
    public = key.public
    print(f"private key: {path} (keep it secret)")
    if replacing and not old:
        print(f"note: the replaced key {path} could not be read, so it may still be in your "
              "trust store; check 'kernelforge trust list' and remove it with "
              "'kernelforge trust remove KEY_ID'", file=sys.stderr)
    # The first replaced key the store holds: the private key's, else (a keygen --force
    # interrupted before it changed the store) the one the .pub still names.
    entry = next((found for k in old if k.key_id != public.key_id and store is not None
                  and (found := store.key(k.key_id)) is not None), None)
    stale = entry.key_id if entry is not None else None
    if entry is not None and not args.repo:
        repos = list(entry.repos)  # a rotated key keeps its scope rather than widening to *
    # The .pub is written once the store is updated, never before: until then it names
    # the key being replaced, so that a run interrupted in between (Ctrl-C, a kill) and
    # run again still finds that key and takes it out of the store.
    try:
        if not args.no_trust:
            trust.add_key(public.text, name=args.name, repos=tuple(repos), replaces=stale)
        elif stale is not None:
            trust.remove(stale)
    except (KernelforgeError, OSError) as err:
        replace_file(pub_file, (public.text + "\n").encode("ascii"))
        fixes = [] if args.no_trust else [
            f"kernelforge trust add {shlex.quote(path_word(pub_file))} "
            f"--name {shlex.quote(args.name)} "
            + " ".join(f"--repo '{r}'" for r in repos)]
        if stale is not None:
            fixes.append(f"kernelforge trust remove {stale}")
        raise KernelforgeError(
            f"the new key is written ({path}, {pub_file}), but your trust store could not "
            f"be updated ({err}); once it is fixed, run: {'; '.join(fixes)}"
        ) from err
    replace_file(pub_file, (public.text + "\n").encode("ascii"))
    print(f"public key:  {public.text}  (also in {pub_file})")
    print(f"key id:      {public.key_id}")
    if not args.no_trust:
        print(f"added to your trust store for {', '.join(repos)}")
    if stale is not None:
        print(f"removed the replaced key {stale} from your trust store; others who trust it "
              f"should run 'kernelforge trust remove {stale}'")
    print("publish with: kernelforge publish PROJECT --repo ORG/NAME --sign "
          + shlex.quote(path_word(path)))
    # the repositories it is for: those --repo named, or those a replaced key kept; every
    # repository ('*') is no scope to hand others, who name the organisation they take it from
    scope = repos if "*" not in repos else ["ORG/*"]
    print(f"others trust it with: kernelforge trust add '{public.text}' "
          + " ".join(f"--repo '{r}'" for r in scope))
    return 0


def _public_key_text(spec: str) -> str:
    """``trust add``'s key as ``ed25519:<base64>``: as given, or read from its file."""
    if _is_key_text(spec):
        return spec.strip()
    path = Path(os.path.expanduser(spec))
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise KernelforgeError(f"{spec}: neither 'ed25519:<base64>' nor a readable public "
                               f"key file ({err})") from err
    if text.startswith("-----BEGIN"):
        from kernelforge.signing import load_signing_key

        public = load_signing_key(path).public
        print(f"note: {spec} is a private key; trusting its public half {public.key_id} (to "
              "let others trust it, give them the public key, never this file)",
              file=sys.stderr)
        return public.text
    from kernelforge.signing import PublicKey

    try:
        return PublicKey.parse(text).text
    except KernelforgeError as err:  # the file holds something else: name it
        raise KernelforgeError(f"{spec}: {err}") from None


def _say_scope(label: str, old: tuple[str, ...] | None, new: tuple[str, ...],
               asked: list[str] | None, remove_as: str, add_again: str = "--repo") -> None:
    """Say what ``trust add`` or ``add-sigstore`` did to an entry's repositories.

    Args:
        label: the entry in words (``key ID (NAME)``, ``sigstore identity ...``).
        old: its patterns before the call; ``None`` when it is new.
        new: its patterns now.
        asked: the ``--repo`` values (``None``: none given).
        remove_as: what ``kernelforge trust remove`` takes to remove it.
        add_again: the options that add it again with a narrower scope, in the hint.
    """
    scope = ", ".join(new)
    if old is None:
        print(f"trusted {label} for {scope}")
    elif old != new:
        from kernelforge.trust import _covering

        # each pattern given stays listed, also one that a broader one covered already
        added = [p for p in new if p.lower() not in {q.lower() for q in old}]
        covered = [f"{p} (under {', '.join(_covering(p, old))})" for p in added
                   if _covering(p, old)]
        note = (f"; {', '.join(covered)} {'was' if len(covered) == 1 else 'were'} covered "
                "already, so it is trusted for no more repositories than before (to narrow "
                f"its scope: 'kernelforge trust remove {shlex.quote(remove_as)}', then add "
                f"it again with {add_again})" if covered else "")
        print(f"{label}: trusted for {', '.join(old)} before, now for {scope}{note}")
    elif not asked:
        widen = "" if "*" in new else (
            " (--repo adds repositories to it; --repo '*' trusts it for all)")
        print(f"{label} was already trusted; it stays trusted for {scope} only{widen}")
    else:
        print(f"{label} was already trusted for {scope}, which covers "
              f"{', '.join(asked)}; its repositories stay the same (to narrow them: "
              f"'kernelforge trust remove {shlex.quote(remove_as)}', then add it again "
              f"with {add_again})")


def _trust_add(args: argparse.Namespace) -> None:
    """``trust add``: a new key, or more repositories (or a new name) for a trusted one,
    saying what changed."""
    from kernelforge import trust
    from kernelforge.signing import PublicKey

    text = _public_key_text(args.key)
    old = trust.load_store().key(PublicKey.parse(text).key_id)  # for the message only
    key = trust.add_key(text, name=args.name, repos=tuple(args.repo) if args.repo else None)
    if old is not None and old.name != key.name:
        print(f"renamed key {key.key_id}: {old.name or 'unnamed'} -> {key.name or 'unnamed'}")
    _say_scope(f"key {key.key_id} ({key.name or 'unnamed'})",
               None if old is None else old.repos, key.repos, args.repo, key.key_id)


def _trust_add_sigstore(args: argparse.Namespace) -> None:
    """``trust add-sigstore``: as ``trust add``, the repositories of an identity already
    trusted are added to, never replaced, and the message says what changed."""
    from kernelforge import trust

    old = trust.load_store().identity(args.identity.strip(), args.issuer)  # for the message
    ident = trust.add_sigstore_identity(args.identity, issuer=args.issuer,
                                        repos=tuple(args.repo) if args.repo else None)
    # `trust remove IDENTITY` removes the identity under every issuer: the hint says so
    _say_scope(f"sigstore identity {ident.identity} ({ident.issuer})",
               None if old is None else old.repos, ident.repos, args.repo, ident.identity,
               add_again=f"--issuer {shlex.quote(ident.issuer)} --repo, and again for each "
                         "other issuer it was trusted under")


def _trust_allow(pattern: str) -> None:
    """``trust allow``: add the pattern, keeping every entry already there (those it
    covers too, so removing it later leaves them allowed), and say so; warn that ``*``
    turns the signature requirement off."""
    from kernelforge import trust

    before = trust.load_store().allow  # for the message only
    quoted = shlex.quote(pattern)
    if not trust.allow_repo(pattern):
        print(f"{pattern} was already allowed without a signature "
              f"('kernelforge trust list' shows the allow list)")
    else:
        broader = trust._covering(pattern, before)
        narrower = trust._covered(pattern, before)
        print(f"allowed {pattern} without a signature" + (
            f" ({', '.join(broader)} allowed it already; this entry keeps it allowed if "
            f"{'that is' if len(broader) == 1 else 'those are'} removed)" if broader else ""))
        if narrower:
            print(f"kept the entries it covers, so they stay allowed if {pattern} is "
                  f"removed later: {', '.join(narrower)}")
    if pattern == "*":
        print("warning: '*' on the allow list turns off the signature requirement for "
              "every repository: unsigned kernels from any publisher on any hub now load; "
              f"undo it with: kernelforge trust remove {quoted}", file=sys.stderr)


def _cmd_trust(args: argparse.Namespace) -> int:
    from kernelforge import trust

    if args.action == "add":
        _trust_add(args)
    elif args.action == "add-sigstore":
        _trust_add_sigstore(args)
    elif args.action == "allow":
        _trust_allow(args.pattern)
    elif args.action == "remove":
        print(f"removed {trust.remove(args.what)}")
    else:
        store = trust.load_store()
        print(f"trust store: {store.path}")
        print("keys:" if store.keys else "keys: none")
        for k in store.keys:
            print(f"  {k.key_id}  {k.name or '-'}  repos {', '.join(k.repos)}  {k.public_key}")
        print("sigstore identities:" if store.sigstore else "sigstore identities: none")
        for s in store.sigstore:
            print(f"  {s.identity}  issuer {s.issuer}  repos {', '.join(s.repos)}")
        print("allowed without signature:" if store.allow else "allowed without signature: none")
        for a in store.allow:
            print(f"  {a}")
    return 0


def commit_prefix_arg(text: str) -> str:
    """argparse type for ``cache remove --revision``: a commit id or a prefix of one."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a commit id; give the commit (or its first 4 to 40 hex "
            "digits) as 'kernelforge cache list' shows it")
    return text.lower()


def cache_variant_arg(text: str) -> str:
    """argparse type for ``cache remove --variant``: a variant's name, never empty or
    blank (typically ``"$UNSET_VARIABLE"``), which would remove nothing and say that
    nothing of the repository is cached."""
    from kernelforge.cache import EMPTY_VARIANT

    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r}: {EMPTY_VARIANT}; pass a variant's name as 'kernelforge cache list' "
            "shows it, or leave --variant out for every variant")
    return text


def cache_dir_arg(text: str) -> str:
    """argparse type for ``--cache``: a directory, never empty (an empty path would be
    the current directory, which ``cache clear`` would empty)."""
    from kernelforge._paths import HERE

    return refuse_empty(text, "a download cache", f"the download cache's directory ({HERE}), "
                        "or leave --cache out for the default (--help says which)")


def days_arg(text: str) -> float:
    """argparse type for ``--older-than``: a number of days, 0 or more."""
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days >= 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days (e.g. 30 or 0.5)")
    return days


def _size_text(n: int) -> str:
    """``n`` bytes in decimal units: ``512 B``, ``3.1 MB``."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if round(size, 1) < 1000:  # 999,950 bytes are 1.0 MB, not 1000.0 kB
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def _when(t: float | None) -> str:
    import time

    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _newer_note(v: Any) -> str:
    """What a listed variant's line adds for an entry a newer kernelforge wrote."""
    if v.newer_format is None:
        return ""
    return f"  (written by a newer kernelforge: entry format {v.newer_format})"


def _undated_note(v: Any) -> str:
    """What a variant's line adds for an entry that records no fetch time, which a
    removal by age dates by its files' modification time instead."""
    if v.fetched is not None or v.newer_format is not None:
        return ""
    parts = ["no fetch time recorded"]
    if v.modified is not None:
        parts.append(f"files last modified {_when(v.modified)}")
    if v.damaged:
        parts.append(f"damaged: {v.damaged}")
    return f"  ({'; '.join(parts)})"


def _say_removed(removed: Any, cache: Any, what: str, age: str = "") -> None:
    n = len(removed.variants)
    print(f"removed {n} variant{'s' if n != 1 else ''} {what}, "
          f"{_size_text(removed.total_bytes)} in all, from {cache.root}")
    for v in removed.variants:
        print(f"  {v.repo_id}  {v.commit[:12]}  {v.variant}  {_size_text(v.size)}"
              f"{_newer_note(v) or (_undated_note(v) if age else '')}")
    _say_kept([v for v in removed.kept if v.newer_format is not None], cache)
    _say_kept_undated([v for v in removed.kept if v.newer_format is None], cache, age)


def _say_kept_undated(kept: list[Any], cache: Any, age: str) -> None:
    """Name the variants a removal by age left because they record no fetch time (a
    damaged entry.json, or one without a time) and their files were modified within
    ``age``: another program may be writing them now. Says how to remove them anyway."""
    if not kept:
        return
    n = len(kept)
    one = n == 1
    print(f"kept {n} variant{'' if one else 's'} whose "
          f"{'entry records' if one else 'entries record'} no fetch time, dated instead by "
          f"{'its' if one else 'their'} files' last modification, less than {age} ago "
          f"(another program may be writing {'it' if one else 'them'} now):")
    for v in kept:
        print(f"  {v.repo_id}  {v.commit[:12]}  {v.variant}  {_size_text(v.size)}"
              f"{_undated_note(v)}")
    first = cache.remove_command(kept[0].repo_id, kept[0].commit)
    refetched = " (a load online fetches a damaged entry again)" if any(
        v.damaged for v in kept) else ""
    print(f"  to remove {'it' if one else 'them'} now, "
          f"{'name it: ' if one else 'name each one, as in '}{first}{refetched}")


def _say_kept(kept: list[Any], cache: Any) -> None:
    """Name the variants a removal by age left because a newer kernelforge wrote them and
    this version cannot read when they were fetched, with how to remove them."""
    if not kept:
        return
    n = len(kept)
    one = n == 1
    print(f"kept {n} variant{'' if one else 's'} written by a newer kernelforge, whose "
          f"{'entry records' if one else 'entries record'} no fetch time this version can "
          f"read ({'its age is' if one else 'their age is'} unknown here, and the newer "
          f"version sharing the cache may need {'it' if one else 'them'}):")
    for v in kept:
        print(f"  {v.repo_id}  {v.commit[:12]}  {v.variant}  {_size_text(v.size)}  "
              f"(entry format {v.newer_format})")
    first = cache.remove_command(kept[0].repo_id, kept[0].commit)
    print(f"  to remove {'it' if one else 'them'} anyway: run this with the newer "
          f"kernelforge, or {'name it: ' if one else 'name each one, as in '}{first}")


def _cmd_cache(args: argparse.Namespace) -> int:
    import json

    from kernelforge.cache import CACHE_ENV, DownloadCache

    cache = DownloadCache(args.cache)
    if cache.root.exists() and not cache.root.is_dir():
        raise KernelforgeError(f"{cache.root} is a file, not a download cache directory; "
                               f"give the cache's directory (--cache, or {CACHE_ENV})")
    if args.action == "list":
        if not cache.root.exists():
            if args.json:  # for scripts: the list, empty
                print("[]")
                return 0
            print(f"the download cache {cache.root} is empty: the directory does not exist "
                  "(nothing was downloaded there yet)")
            return 0
        # a mistyped --cache naming another directory is said, not listed as empty
        cache.check_is_cache(refusing="to list it")
        variants = cache.variants()
        if args.json:
            print(json.dumps([{"repo-id": v.repo_id, "commit": v.commit, "variant": v.variant,
                               "size": v.size, "fetched": v.fetched, "damaged": v.damaged,
                               "newer-format": v.newer_format}
                              for v in variants], indent=1))
            return 0
        other = cache.other_size()
        if not variants and not other:
            print(f"the download cache {cache.root} is empty")
            return 0
        rows = [(v.repo_id, v.commit[:12], v.variant, _size_text(v.size), _when(v.fetched))
                for v in variants]
        head = ("REPOSITORY", "REVISION", "VARIANT", "SIZE", "FETCHED")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for row in [head, *rows] if rows else []:  # no header over no rows
            print("  ".join(c.rjust(w) if i == 3 else c.ljust(w)
                            for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        for v in variants:
            if v.damaged:
                print(f"damaged: {v.repo_id} {v.commit[:12]} {v.variant}: {v.damaged}; a load "
                      "online fetches it again ('kernelforge cache remove' drops it)")
            elif v.newer_format is not None:
                print(f"newer: {v.repo_id} {v.commit[:12]} {v.variant}: its entry.json is of "
                      f"format {v.newer_format}, written by a newer kernelforge; this version "
                      "cannot use it and leaves it as it is: a load here refuses it "
                      "(upgrade kernelforge, or 'kernelforge cache remove' it to have this "
                      "version fetch it again), and 'cache clear --older-than' removes it "
                      "only by a fetch time it can read")
        total = sum(v.size for v in variants) + other
        print(f"{len(variants)} variant{'s' if len(variants) != 1 else ''}, "
              f"{_size_text(total)} in all ({_size_text(other)} of metadata, listings and "
              f"leftovers) in {cache.root}")
        return 0
    if args.action == "remove":
        commits = None
        if args.revision:
            commits = cache.commits_matching(args.repo, args.revision)
            if not commits:
                raise KernelforgeError(
                    f"{args.repo}: no cached revision starts with {args.revision} in "
                    f"{cache.root}; 'kernelforge cache list' shows what is cached")
            if len(commits) > 1:
                raise KernelforgeError(
                    f"{args.repo}: {args.revision} is the start of {len(commits)} cached "
                    f"revisions ({', '.join(c[:12] for c in commits)}); give more digits")
        removed = cache.remove(args.repo, commits=commits, variant=args.variant)
        if not removed.variants and not removed.other_bytes:
            what = args.repo + (f" at {args.revision}" if args.revision else "") + (
                f", variant {args.variant}" if args.variant else "")
            raise KernelforgeError(f"nothing of {what} is in the download cache "
                                   f"{cache.root}; 'kernelforge cache list' shows what is")
        _say_removed(removed, cache, f"of {args.repo}")
        return 0
    if args.older_than is None:
        removed = cache.remove()
        if not removed.variants and not removed.other_bytes:
            print(f"the download cache {cache.root} is already empty")
            return 0
        _say_removed(removed, cache, "and every other cached file")
    else:
        removed = cache.remove(older_than=args.older_than * 86400)
        age = f"{args.older_than:g} day{'' if args.older_than == 1 else 's'}"
        _say_removed(removed, cache, f"fetched more than {age} ago", age)
    return 0


def _trust_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow kernels not signed by a trusted key")
    p.add_argument("--allow", action="append", metavar="ORG/NAME", type=allow_arg,
                   help="allow this repository without a trusted signature (repeatable)")


def add_commands(sub: Any) -> None:
    """Register info, lock, download, cache, keygen and trust on the ``kernelforge`` parser.

    Args:
        sub: the parser's subparsers object.
    """
    p = sub.add_parser("info", help="show which revision and variant a load picks, and why")
    p.add_argument("repo", type=repo_arg, help="repository id, org/name")
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--revision", type=revision_arg, help="a branch, tag or commit")
    sel.add_argument("--version", type=version_arg, help="a major version (branch vN)")
    sel.add_argument("--lock", metavar="FILE", type=lock_arg,
                     help="describe what this lock file pins")
    p.add_argument("--backend", type=backend_arg,
                   help="choose for this backend instead of the system's "
                   "(one torch in this process supports: cpu, or its own backend)")
    p.add_argument("--hub", type=hub_arg, help=INFO_HUB_HELP)
    _trust_flags(p)
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("lock", help="pin a project's kernels (pyproject.toml) in kernelforge.lock")
    p.add_argument("path", nargs="?", default=".", type=lock_project_arg,
                   help="the project directory, holding pyproject.toml (default: .)")
    p.add_argument("--hub", type=hub_arg, help=HUB_HELP)
    _trust_flags(p)
    p.set_defaults(func=_cmd_lock)

    p = sub.add_parser("download", help="fetch a project's locked kernels for offline use")
    p.add_argument("path", nargs="?", default=".", type=lock_path_arg,
                   help="a lock file, or the project directory holding one, or its "
                   "pyproject.toml (default: .)")
    p.add_argument("--all-variants", action="store_true",
                   help="every locked variant, not only this system's")
    p.add_argument("--backend", type=backend_arg,
                   help="choose for this backend instead of the system's "
                   "(one torch in this process supports: cpu, or its own backend; "
                   "--all-variants fetches the variants for any machine)")
    p.add_argument("--hub", type=hub_arg, help=DOWNLOAD_HUB_HELP)
    p.set_defaults(func=_cmd_download)

    cache_help = ("the download cache (default: $KERNELFORGE_CACHE, else downloads/ in the "
                  "user cache)")
    p = sub.add_parser("cache", help="list or remove the kernels downloaded from remote hubs")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = csub.add_parser("list", help="each cached variant with its size and fetch time")
    c.add_argument("--json", action="store_true", help="as JSON, sizes in bytes")
    c.add_argument("--cache", metavar="DIR", type=cache_dir_arg, help=cache_help)
    c = csub.add_parser("remove", help="remove a repository's cached variants")
    c.add_argument("repo", type=repo_arg, help="repository id, org/name")
    c.add_argument("--revision", type=commit_prefix_arg,
                   help="only this commit (or its first digits, as 'cache list' shows it)")
    c.add_argument("--variant", type=cache_variant_arg,
                   help="only this variant (e.g. torch29-cxx11-cu128-x86_64-linux)")
    c.add_argument("--cache", metavar="DIR", type=cache_dir_arg, help=cache_help)
    c = csub.add_parser("clear", help="empty the download cache")
    c.add_argument("--older-than", metavar="DAYS", type=days_arg,
                   help="only variants fetched more than DAYS days ago; one whose entry "
                   "records no fetch time (a damaged one, say) is dated by its files' last "
                   "modification")
    c.add_argument("--cache", metavar="DIR", type=cache_dir_arg, help=cache_help)
    p.set_defaults(func=_cmd_cache)

    p = sub.add_parser("keygen", help="create a publisher signing key (ed25519)")
    p.add_argument("--name", default="default", type=key_label_arg,
                   help="key name (default: default); without --out it names the file, "
                        "so only letters, digits, '.', '_' and '-'; with --out it is only "
                        "a label")
    p.add_argument("--out", metavar="FILE", type=key_file_arg,
                   help="private key file (default: <config>/keys/NAME.pem)")
    p.add_argument("--repo", action="append", metavar="PATTERN", type=pattern_arg,
                   help="trust it yourself only for these repositories (org/*, repeatable; "
                        "default: *, or with --force the replaced key's)")
    p.add_argument("--no-trust", action="store_true", help="do not add it to your trust store")
    p.add_argument("--force", action="store_true",
                   help="replace an existing key file (and untrust the replaced key)")
    p.set_defaults(func=_cmd_keygen,
                   check_args=lambda args, parser=p: _check_keygen_args(parser, args))

    p = sub.add_parser("trust", help="manage the trust store (keys, sigstore identities, "
                                     "allow list)")
    tsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = tsub.add_parser("add", help="trust a publisher key (ed25519:... or a key file)")
    t.add_argument("key", type=public_key_arg,
                   help="the publisher's public key, 'ed25519:<base64>' as "
                   "'kernelforge keygen' prints it, or its .pub file")
    t.add_argument("--name", type=key_label_arg,
                   help="a label, 1 to 100 printable characters (default: a trusted key "
                        "keeps its own)")
    t.add_argument("--repo", action="append", metavar="PATTERN", type=pattern_arg,
                   help="only for these repositories: org/name or org/* (repeatable; "
                        "default: * for a new key; a trusted key gets these added to its "
                        "repositories, and keeps them when --repo is left out)")
    t = tsub.add_parser("add-sigstore", help="trust a sigstore identity (a CI workflow URI)")
    t.add_argument("identity",
                   help="the signer's certificate identity: for GitHub Actions the workflow "
                        "URI, e.g. https://github.com/ORG/REPO/.github/workflows/build.yaml"
                        "@refs/heads/main")
    t.add_argument("--issuer", default=_GITHUB_ISSUER,
                   help="the OIDC issuer of the identity, an https:// URL (default: "
                        "%(default)s, GitHub Actions)")
    t.add_argument("--repo", action="append", metavar="PATTERN", type=pattern_arg,
                   help="only for these repositories: org/name or org/* (repeatable; "
                        "default: * for a new identity; a trusted identity gets these "
                        "added to its repositories, and keeps them when --repo is left out)")
    t.set_defaults(check_args=lambda args, parser=t: _check_sigstore_args(parser, args))
    t = tsub.add_parser("allow", help="allow a repository (or org/*) without a signature")
    t.add_argument("pattern", type=pattern_arg,
                   help="org/name, org/* or * (every repository: no signature required "
                        "anywhere); the entries already allowed stay")
    t = tsub.add_parser("remove", help="remove a key, sigstore identity or allowed "
                                      "repository pattern")
    t.add_argument("what", help="a key id (or its first 8 or more hex digits), a key's "
                   "name (when one key has it) or public key (ed25519:...), a sigstore "
                   "identity (removed under every issuer) or an allowed repository "
                   "pattern, as 'kernelforge trust list' shows them")
    tsub.add_parser("list", help="show the trust store")
    p.set_defaults(func=_cmd_trust)
