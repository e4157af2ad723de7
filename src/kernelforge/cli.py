"""The ``kernelforge`` command: a thin layer over the library.

This is the only place that turns exceptions into exit codes: 0 success, 1 a failure
(a kernelforge error or the system's, message printed, no traceback), 2 bad usage, 130
interrupted (Ctrl-C), 141 output cut off (a closed pipe, as in ``kernelforge info ... |
head``: 128 + SIGPIPE, what the shell reports for a program killed by it).

What a command reports (a listing, a result, a build's progress) goes to stdout, written
line by line; errors, warnings and notes about the command go to stderr, one
``error:``/``warning:``/``note:`` line each (README.md, "The command line").

Arguments are checked by argparse (``type=`` functions), so a malformed one is bad
usage: argparse prints ``kernelforge CMD: error: argument ...`` and exits 2. Values that
come from files (``build.toml``, ``pyproject.toml``) are checked where they are read and
raise :class:`~kernelforge.errors.KernelforgeError`. Any other exception is a bug in
kernelforge and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from kernelforge import __version__
from kernelforge.cli_share import add_commands, hub_arg, load_signer, refuse_empty, repo_arg
from kernelforge.errors import WARNING_PREFIX, KernelforgeError, one_line

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.build import BuildResult


def _cmd_check(args: argparse.Namespace) -> int:
    from kernelforge.errors import ManifestError
    from kernelforge.manifest import check_buildable, check_project, load_manifest

    # A manifest with problems stops here; otherwise the missing files and the rules the
    # build would break are reported together.
    m = load_manifest(args.path)
    problems: list[ManifestError] = []
    notes: list[str] = []
    try:
        check_project(m.path)
    except ManifestError as err:
        problems.append(err)
    try:
        notes = check_buildable(m)
    except ManifestError as err:
        problems.append(err)
    if problems:
        for note in m.notes:  # said by build too: not lost behind the errors
            print(f"note: {note}", file=sys.stderr)
        raise ManifestError.combine(problems)
    kernels = ", ".join(f"{k.name} ({k.backend})" for k in m.kernels.values()) or (
        "none (noarch)" if m.noarch else "none")
    print(f"{m.path}: ok")
    print(f"  name {m.name}, version {m.version if m.version is not None else 1}, "
          f"edition {m.edition}, backends {', '.join(m.backends)}")
    print(f"  kernels: {kernels}")
    for note in notes:
        print(f"  note: {note}")
    return 0


class _AppendArchOrBackend(argparse.Action):
    """``append`` for build's ``--arch`` and ``--backend``, refusing values that do not
    fit together (:func:`kernelforge.archs.arch_backend_problem`, which ``build_project``
    applies too) as a usage error of ``kernelforge build`` (its usage line, exit 2) as
    soon as the option that breaks the fit is read."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from kernelforge.archs import arch_backend_problem

        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])
        problem = arch_backend_problem(getattr(namespace, "arch", None) or (),
                                       getattr(namespace, "backend", None) or ())
        if problem:
            parser.error(problem)


#: The build's progress line for a variant found up to date (``build_project``).
_UP_TO_DATE = re.compile(r"^(?P<variant>\S+): up to date$")


def _cmd_build(args: argparse.Namespace) -> int:
    from kernelforge.build import build_run

    pythons = list(dict.fromkeys(args.python or [None]))
    # one run: a compiler that did not answer for one environment is not waited for again
    with build_run():
        results, failed = _build_each(args, pythons)
    if args.arch and results:
        from kernelforge.manifest import load_manifest

        manifest = load_manifest(args.path)
        arch = f"note: --arch {' '.join(args.arch)} had no effect"
        if manifest.noarch:
            print(f"{arch}: the project is noarch (nothing is compiled; its [torch-noarch] "
                  "archs go to the metadata)", file=sys.stderr)
        elif not any(_gpu_variant(r.variant) for r in results):
            gpu = [b for b in manifest.backends if b in ("cuda", "rocm")]
            if args.backend:
                why = f"--backend {' '.join(args.backend)} builds no CUDA or ROCm variant"
            elif not gpu:
                why = "the project has no CUDA or ROCm kernels"
            else:
                why = ("no CUDA or ROCm variant was built (the skipped backends above say "
                       "why)")
            print(f"{arch}: {why}", file=sys.stderr)
    if failed:
        print(f"error: the build failed for {len(failed)} of {len(pythons)} environments: "
              + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def _build_each(args: argparse.Namespace, pythons: list[str | None]
                ) -> tuple[list[BuildResult], list[str]]:
    """``build`` for each environment in turn: the variants built, and the environments
    that failed (each reported as it fails, with the others still built)."""
    from kernelforge.errors import ManifestError

    results: list[BuildResult] = []
    failed: list[str] = []
    noted: set[str] = set()  # notes about the project: said for the first environment
    for python in pythons:
        try:
            built = _build_for(args, python, noted)
        except ManifestError:
            raise  # the same for every environment
        except KernelforgeError as err:
            if len(pythons) == 1:
                raise
            # One environment's failure does not hide what the others build.
            said = str(err)  # most errors of an environment name its --python already
            named = said if said.startswith("--python ") else f"--python {python}: {said}"
            print(f"error: {named}", file=sys.stderr)
            failed.append(str(python))
            continue
        again = sorted({r.variant for r in built if not r.up_to_date}
                       & {r.variant for r in results})
        if again:
            print(f"note: --python {python} builds {', '.join(again)} again, as an "
                  "environment before it did (the same torch and CUDA/ROCm versions); "
                  "build/ holds this build", file=sys.stderr)
        results += built
    return results, failed


def _build_for(args: argparse.Namespace, python: str | None,
               noted: set[str]) -> list[BuildResult]:
    """``build`` for one environment (``--python``, or this one), printing its progress
    and a line per variant; a ``note:`` line in ``noted`` (said for an environment
    before) is not said again."""
    from kernelforge.build import build_project

    held: list[str] = []

    def progress(line: str) -> None:
        # "<variant>: up to date" has no path: the summary below says it with the path,
        # once. Held back only until then (or until the build fails).
        if _UP_TO_DATE.match(line):
            held.append(line)
        elif line.startswith("note: "):
            if line not in noted:
                noted.add(line)
                print(line)
        else:
            print(line)

    try:
        results = build_project(
            args.path,
            backends=args.backend or None,
            archs=args.arch or None,
            jobs=args.jobs,
            force=args.force,
            verbose=args.verbose,
            progress=progress,
            python=python,
        )
    except BaseException:
        for line in held:
            print(line)
        raise
    summarised = {r.variant for r in results if r.up_to_date}
    for line in held:
        m = _UP_TO_DATE.match(line)
        if m is None or m["variant"] not in summarised:
            print(line)
    for r in results:
        if r.up_to_date:
            print(f"{r.variant}: up to date -> {r.path}")
        else:
            print(f"{r.variant}: built in {r.seconds:.1f}s -> {r.path}")
    return results


def _gpu_variant(name: str) -> bool:
    from kernelforge.errors import VariantError
    from kernelforge.variants import Variant

    try:
        return Variant.parse(name).backend in ("cuda", "rocm")
    except VariantError:
        return False


def _hub(args: argparse.Namespace):
    from kernelforge.hub import as_hub

    return as_hub(args.hub)  # a directory, "hf", or None: $KERNELFORGE_HUB / local hub


def _recorded_source_hashes(build_dir: Path) -> dict[str, str]:
    """``{variant: provenance source-sha256}`` of the variants in ``build_dir`` that
    record one (kernelforge builds do; others, and unreadable metadata, are left to
    the publish checks)."""
    from kernelforge.errors import HubError
    from kernelforge.hub._staging import read_metadata

    found: dict[str, str] = {}
    for vdir in sorted(build_dir.iterdir()):
        if vdir.name.startswith(".") or not (vdir / "metadata.json").is_file():
            continue
        try:
            meta = read_metadata(vdir)
        except HubError:
            continue
        prov = meta.get("provenance")
        source = prov.get("source-sha256") if isinstance(prov, dict) else None
        if isinstance(source, str):
            found[vdir.name] = source
    return found


def _stale_warnings(manifest: Any, build_dir: Path, path: str) -> list[tuple[str, str]]:
    """The variants built from other files than the project holds now, each with what
    differs, for a warning once the publish went ahead (a publish the hub refuses
    publishes nothing, so there is nothing to warn about then).

    Not a refusal: publishing an older build can be what the user wants, and the files
    that changed may not be compiled at all (a README.md edited for ``--card``). The
    hash is the build's own (:func:`kernelforge.build.source_identity`): it covers every
    file of the project, as the variant's uid does, so the warning says that rather than
    calling the build stale. It is computed only when some variant records one: it
    costs what a no-op build's check costs.

    Returns:
        ``(variant, what differs)`` pairs; a variant of ``""`` is a note that the
        check could not be made.
    """
    recorded = _recorded_source_hashes(build_dir)
    if not recorded:
        return []
    from kernelforge.build import source_identity

    try:
        current = source_identity(manifest.root, manifest).content_hash
    except KernelforgeError as err:  # a check, not a reason to refuse the publish
        return [("", f"cannot tell whether build/ is up to date ({err})")]
    return [(variant, f"the files of {path} differ from those {variant} was built from "
             f"(hash {source[:7]} at the build, {current[:7]} now; the hash, like the "
             "variant's uid, covers every file of the project, a README.md too)")
            for variant, source in recorded.items() if source != current]


def _warn_stale(stale: list[tuple[str, str]], path: str, published: bool) -> None:
    """Say :func:`_stale_warnings` after the publish: ``published`` when it made a new
    revision, else the hub already held the build."""
    for variant, differs in stale:
        if not variant:
            print(f"note: {differs}", file=sys.stderr)
            continue
        done = "published" if published else "the hub already holds"
        print(f"warning: {differs}: {done} {variant} as it was built; to publish the "
              f"current files, run 'kernelforge build {shlex.quote(path)}' (the variant "
              "gets a new "
              "uid), then publish again", file=sys.stderr)


def _read_card(spec: str, project: Path) -> str:
    """The README text ``--card`` names, a path from the current directory (as for any
    command-line path), with a hint where the ``project`` holds that file instead."""
    path = Path(os.path.expanduser(spec))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else f"not UTF-8 text ({err.reason})"
        there = project / spec
        fix = (f"did you mean --card {shlex.quote(str(there))}? (the path is taken from the "
               "current directory)"
               if not path.is_absolute() and not path.exists() and there.is_file()
               else "pass a README file, e.g. --card README.md")
        raise KernelforgeError(f"--card {spec}: cannot read the card {path.absolute()} "
                               f"({why}); fix: {fix}") from err
    from kernelforge.hub.base import check_card

    try:  # refused before the build is read, as the hub would refuse it
        check_card(text)
    except ValueError as err:
        raise KernelforgeError(f"--card {spec}: {str(err).removeprefix('card: ')}") from None
    return text


def _cmd_publish(args: argparse.Namespace) -> int:
    from kernelforge.hub._staging import BUILDER_CARD, unbuilt_project
    from kernelforge.manifest import load_manifest

    manifest = load_manifest(args.path)
    repo = args.repo or manifest.hub_repo_id
    if not repo:
        raise KernelforgeError(
            "publish needs a repository: pass --repo org/name, e.g. 'kernelforge publish "
            f"{shlex.quote(args.path)} --repo <org>/{manifest.name}' (or set [general.hub] "
            "repo-id in build.toml)"
        )
    build_dir = manifest.root / "build"
    if not build_dir.is_dir():
        raise KernelforgeError(unbuilt_project(args.path))
    version = manifest.version if manifest.version is not None else 1
    card = _read_card(args.card, Path(args.path)) if args.card else None
    builder_card = build_dir / BUILDER_CARD
    if card is None and builder_card.is_file():
        print(f"note: {builder_card} (the card Hugging Face's kernel-builder renders) is not "
              "a variant and is not published; to publish it as the repository card, add "
              f"--card {shlex.quote(str(builder_card))}",
              file=sys.stderr)
    hub = _hub(args)
    signer = load_signer(args.sign) if args.sign else None
    stale = _stale_warnings(manifest, build_dir, args.path)
    # A changed build is refused by the hub itself, in publish words (every hub checks
    # with kernelforge.hub._staging.check_digests).
    rev = hub.publish(repo, build_dir, version=version, message=args.message or "",
                      card=card, signer=signer)
    repo = rev.repo_id  # as the hub keeps it (a local hub: the first publish's spelling)
    if rev.commit == rev.parent:  # the hub made no revision that would change nothing
        print(f"unchanged: {repo} version {version} (branch v{version}) already holds this "
              f"build, at revision {rev.commit[:12]}")
    else:
        print(f"published {repo} version {version} (branch v{version}) revision "
              f"{rev.commit[:12]}")
    print(f"  variants: {', '.join(rev.variants)}")
    print(f"  hub: {getattr(hub, 'root', None) or hub.describe()}")
    if signer is not None:
        print(f"  signed with key {signer.public.key_id}")
    if card is not None:
        print(f"  card: {args.card} (README.md on branch v{version} and on branch main)")
    _warn_stale(stale, args.path, published=rev.commit != rev.parent)
    placeholder = _CARD_PLACEHOLDER.search(_HTML_COMMENT.sub("", card or ""))
    if placeholder is not None:
        print(f"warning: the card {args.card} still says '{placeholder[0]}', the "
              "placeholder 'kernelforge init' writes: its usage example names no "
              f"repository a reader could load; replace <org> with {repo.split('/')[0]} in "
              "it, then publish again with --card", file=sys.stderr)
    return 0


#: The repository owner that the card ``kernelforge init`` writes leaves for the user to
#: fill in (``get_kernel("<org>/my-relu")``): a card published with it shows readers an
#: example that loads nothing.
_CARD_PLACEHOLDER = re.compile(r"<org>/[A-Za-z0-9._-]*")
#: An HTML comment of a card, which no reader sees: the one ``kernelforge init`` writes
#: says how to publish it, with ``<org>/NAME``, and may stay once the card is filled in.
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _cmd_versions(args: argparse.Namespace) -> int:
    from kernelforge.errors import HubError
    from kernelforge.hub.hf import refs_listed_once
    from kernelforge.locate import hub_choice_explained

    hub = _hub(args)
    try:
        # an error says when KERNELFORGE_HUB chose the hub, as a load's does; the
        # branches, the redirect and the tags shown come from one listing of the refs
        with hub_choice_explained(args.hub, hub, args.repo), refs_listed_once():
            return _versions(hub, args.repo)
    except HubError as err:
        if args.hub is None and getattr(hub, "kind", None) == "local":
            raise HubError(f"{err} (to look on the Hugging Face Hub: --hub hf)") from err
        raise


def _versions(hub: Any, repo: str) -> int:
    """Print what ``kernelforge versions`` shows of ``repo`` in ``hub``."""
    if not hasattr(hub, "log"):  # a remote hub: no history, the head of each branch
        heads = hub.branches(repo)  # first: a failure prints no header
        print(f"{repo} on the {hub.describe()}")
        _print_redirect(hub, repo)
        for branch, commit in sorted(heads.items(), key=lambda bc: _branch_order(bc[0])):
            names = hub.variants(repo, commit)
            remark = _no_build(hub, repo, branch, commit, names)
            print(f"  {one_line(branch)}  {commit[:12]}{remark}")
            for variant in names:
                print(f"      {one_line(variant)}")
        _print_tags(hub, repo)
        return 0
    branches = hub.branches(repo)
    if not branches:  # a first publish that died before its revision: said as an error
        from kernelforge.errors import HubError

        raise HubError(f"{_stored(hub, repo)}: no versions published in {hub.root}")
    print(f"{_stored(hub, repo)} in {hub.root}")
    _print_redirect(hub, repo)
    for branch in sorted(branches, key=_branch_order):
        print(f"  {one_line(branch)}")
        for rev in hub.log(repo, branch):
            print(f"    {rev.commit[:12]}  {rev.when:%Y-%m-%d %H:%M:%S}  "
                  f"{_summary(rev.message)}".rstrip())
            for variant in rev.variants:
                print(f"      {one_line(variant)}")
    _print_tags(hub, repo)
    return 0


def _no_build(hub: Any, repo: str, branch: str, commit: str, names: list[str]) -> str:
    """What ``versions`` adds to a version branch of a remote hub whose commit holds no
    file under ``build/`` (read from the file list it just read for the variants): the
    Hub needs a version's branch before the commit that fills it."""
    from kernelforge.hub.base import VERSION_BRANCH_RE
    from kernelforge.revisions import holds_build

    if names or not VERSION_BRANCH_RE.match(branch) or holds_build(hub, repo, commit):
        return ""
    return ("  (no build: a publish of this version may be under way, or one that failed "
            "left the branch; loads that pin no version pass over it)")


def _summary(message: str) -> str:
    """A revision message on the one line ``versions`` gives it: its first line, with
    `` ...`` where more follow, and what the terminal would act on (a control character,
    an escape sequence) written as an escape, as for a message another user of a shared
    hub wrote."""
    lines = message.strip().splitlines() or [""]
    return one_line(lines[0].strip()) + (" ..." if len(lines) > 1 else "")


def _print_redirect(hub: Any, repo: str) -> None:
    """The ``kernel-status.toml`` redirect of ``repo``, which loads follow, if it has one."""
    from kernelforge.revisions import _redirect

    try:
        target = _redirect(hub, repo)
    except KernelforgeError as err:  # a status this version cannot read: list the rest
        print(f"  note: {err}")
        return
    if target is not None:
        at = f" at {one_line(target.revision)}" if target.revision else ""
        print(f"  redirects to {target.destination}{at}: loads of {repo} take that "
              "repository (kernel-status.toml on main)")


def _print_tags(hub: Any, repo: str) -> None:
    """The tags of ``repo``, which ``revision=`` takes as it takes a branch."""
    tags = hub.tags(repo)
    if tags:
        print("  tags:")
        for tag, commit in sorted(tags.items()):
            print(f"    {one_line(tag)}  {commit[:12]}")


def _stored(hub: Any, repo: str) -> str:
    """``repo`` as the local hub spells it (ids ignore case; it keeps the spelling of the
    first publish); as given for other hubs."""
    stored_id = getattr(hub, "stored_id", None)
    return str(stored_id(repo)) if callable(stored_id) else repo


def _branch_order(branch: str) -> tuple[int, str]:
    if branch.startswith("v") and branch[1:].isdigit():
        return (-int(branch[1:]), branch)
    return (1, branch)


def _cmd_init(args: argparse.Namespace) -> int:
    from kernelforge._paths import path_word
    from kernelforge.scaffold import init_project

    dest = init_project(args.name, Path(args.directory) if args.directory else None)
    print(f"created {dest}")
    quoted = shlex.quote(path_word(dest))
    print(f"next: kernelforge build {quoted} && kernelforge publish {quoted} "
          f"--repo <org>/{args.name}")
    return 0


def kernel_name_arg(text: str) -> str:
    """argparse type for ``init``'s name: one :func:`~kernelforge.scaffold.init_project`
    can use, so that a bad name is bad usage (exit 2), as any malformed argument is."""
    from kernelforge.scaffold import check_name

    try:
        check_name(text)
    except KernelforgeError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return text


def _init_error(error: Callable[[str], NoReturn]) -> Callable[[str], NoReturn]:
    """``init``'s usage errors: a missing name says how to give one. ``kernelforge init
    -x`` lands there too, as argparse reads ``-x`` as an option, so it says that a name
    cannot start with '-' (no kernel name does)."""

    def init_error(message: str) -> NoReturn:
        if message.endswith("required: name"):
            message += (" (give the kernel's name, e.g. 'kernelforge init my-relu'; a name "
                        "starts with a lowercase letter: one starting with '-' is read as "
                        "an option)")
        error(message)

    return init_error


def _local_hub_dir(value: str) -> str:
    from kernelforge.hub import HF_NAMES

    value = hub_arg(value)
    if value.lower() in HF_NAMES:
        raise argparse.ArgumentTypeError(
            "the demo publishes to a local hub only; pass a directory (or leave --hub out)")
    return value


def _cmd_demo(args: argparse.Namespace) -> int:
    from kernelforge.demo import run_demo

    if run_demo(hub=Path(args.hub) if args.hub else None):
        return 0
    # its steps went to stdout; the failure goes to stderr, as every failure does
    print("error: the demo's kernel gave other outputs than torch.relu (the lines marked NO "
          "above say for which device and dtype)", file=sys.stderr)
    return 1


def arch_arg(text: str) -> str:
    """argparse type for ``--arch``: a CUDA capability or a ROCm arch, canonically spelt."""
    from kernelforge.archs import parse_arch

    try:
        return parse_arch(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def sign_arg(text: str) -> str:
    """argparse type for ``publish --sign``: a key, never empty. An empty one would read
    as no ``--sign`` at all and publish the build unsigned without a word, where a hub's
    ``publish(signer="")`` is refused."""
    return refuse_empty(text, "a signing key", "the signing key's file or its 'kernelforge "
                        "keygen' name, or leave --sign out to publish unsigned",
                        would="read as --sign left out")


def card_arg(text: str) -> str:
    """argparse type for ``publish --card``: a file, never empty. An empty one would
    read as no ``--card`` at all and publish the build without the card asked for."""
    return refuse_empty(text, "a card file", "the README file to publish as the repository "
                        "card, or leave --card out to publish none",
                        would="read as --card left out")


def project_arg(text: str) -> str:
    """argparse type for ``check``, ``build`` and ``publish``'s PATH: a project, never an
    empty string, which would check, build or publish whatever project the current
    directory holds; the library's refusal (``load_manifest("")``) in the same words."""
    from kernelforge.manifest import PROJECT_GIVE

    return refuse_empty(text, "a kernel project", PROJECT_GIVE)


def python_arg(text: str) -> str:
    """argparse type for ``build --python``: an interpreter, never an empty string."""
    return refuse_empty(text, "a Python interpreter", "the path of the environment's "
                        "python, or leave --python out to build for this one")


def init_dir_arg(text: str) -> str:
    """argparse type for ``init``'s DIR: never an empty string, which ``init`` would read
    as DIR left out and put the project in ./NAME, not where the variable meant."""
    from kernelforge._paths import HERE

    return refuse_empty(text, "a project directory", f"the directory to create the project "
                        f"in ({HERE}), or leave DIR out for ./NAME",
                        would="read as DIR left out")


def jobs_arg(text: str) -> int:
    """argparse type for ``-j``: a positive number of compile jobs."""
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of jobs; expected a "
                                         "positive integer, e.g. -j 4")
    return jobs


#: argparse's "invalid choice" message (its choices quoted or not, by Python version)
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)$")


#: An example for the error that no command was given, where its first subcommand would
#: not do (the others show their ``list``, else their first).
_FIRST_STEPS = {"kernelforge": "kernelforge init my-relu"}


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelt command or option (Python 3.14's
    ``suggest_on_error``, for every Python this package runs on), and the list of
    commands where none was given."""

    def _subcommands(self) -> argparse._SubParsersAction | None:
        return next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)),
                    None)

    def error(self, message: str) -> NoReturn:
        sub = self._subcommands()
        if (sub is not None and sub.metavar
                and message == f"the following arguments are required: {sub.metavar}"):
            # `kernelforge` alone (or `kernelforge cache`): the usage line alone names no
            # command to run, the help lists them with what each does
            word = str(sub.metavar).lower()
            first = "list" if "list" in sub.choices else next(iter(sub.choices))
            example = _FIRST_STEPS.get(self.prog, f"{self.prog} {first}")
            self.print_help(sys.stderr)
            self.exit(2, f"{self.prog}: error: no {word} given: choose one of the "
                         f"{word}s above, e.g. '{example}' ('{self.prog} {word.upper()} "
                         "--help' shows what one takes)\n")
        m = _INVALID_CHOICE.search(message)
        if m:
            choices = [c.strip().strip("'") for c in m.group("choices").split(",")]
            near = difflib.get_close_matches(m.group("word"), choices, n=1)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)


def _unrecognized(parser: argparse.ArgumentParser, extra: Sequence[str]) -> NoReturn:
    """Refuse arguments a (sub)command does not take, with its usage line, and the option
    meant where one is close."""
    message = f"unrecognized arguments: {' '.join(extra)}"
    options = [o for action in parser._actions for o in action.option_strings]
    for word in extra:
        near = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
        if word.startswith("-") and near:
            message += f"; did you mean {near[0]}?"
            break
    parser.error(message)


def _innermost(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` chose: ``kernelforge cache list``'s, say."""
    while True:
        chosen = None
        for action in parser._actions:  # argparse keeps its subcommands only there
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
        if not isinstance(chosen, argparse.ArgumentParser):
            return parser
        parser = chosen


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kernelforge",
        description="Build, share and load GPU compute kernels for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"kernelforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("init", help="scaffold a kernel project in the guide's layout")
    p.add_argument("name", type=kernel_name_arg, help="kernel name, e.g. my-relu")
    p.add_argument("directory", nargs="?", type=init_dir_arg,
                   help="where to create it (default: ./NAME)")
    p.error = _init_error(p.error)  # type: ignore[method-assign,assignment]
    p.set_defaults(func=_cmd_init)

    project_help = "the project directory, holding build.toml (default: .)"
    p = sub.add_parser("check", help="validate a project's build.toml and files")
    p.add_argument("path", nargs="?", default=".", type=project_arg, help=project_help)
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("build", help="compile a project into build/<variant>/")
    p.add_argument("path", nargs="?", default=".", type=project_arg, help=project_help)
    p.add_argument("--backend", action=_AppendArchOrBackend,
                   help="build only this backend (repeatable): cpu, cuda or rocm, one the "
                        "project has kernels for; a noarch project packages any backend it "
                        "lists (cann, cpu, cuda, metal, neuron, rocm, tpu, xpu) (default: "
                        "every backend of the project this environment can build)")
    p.add_argument("--arch", action=_AppendArchOrBackend, type=arch_arg,
                   help="CUDA capability or ROCm arch to build for (repeatable), e.g. "
                        "--arch 9.0a or --arch gfx942; a kernel section that declares "
                        "cuda-capabilities compiles for those of its own that serve it "
                        "(its 9.0a for --arch 9.0)")
    p.add_argument("-j", "--jobs", type=jobs_arg,
                   help="parallel compile jobs (default: $MAX_JOBS when set, else all cores)")
    p.add_argument("--force", action="store_true",
                   help="build even when up to date, rewriting build/<variant>/ (ninja still "
                        "reuses unchanged object files; delete .kernelforge/ for a build "
                        "from scratch)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every compiler line")
    p.add_argument("--python", metavar="PATH", action="append", type=python_arg,
                   help="build for the torch installed in another Python environment "
                        "(the path of its python), e.g. another torch or CUDA version; "
                        "repeatable: one build after another, each environment's variants "
                        "side by side in build/")
    p.set_defaults(func=_cmd_build)

    hub_help = ("a local hub directory, or 'hf' for the Hugging Face Hub (default: "
                "$KERNELFORGE_HUB, else the local hub in the user cache)")
    p = sub.add_parser("publish", help="publish a project's builds to a hub (local by default)")
    p.add_argument("path", nargs="?", default=".", type=project_arg, help=project_help)
    p.add_argument("--repo", type=repo_arg,
                   help="repository id, org/name (default: [general.hub] repo-id in "
                        "build.toml)")
    p.add_argument("--hub", type=hub_arg, help=hub_help)
    p.add_argument("-m", "--message",
                   help="revision message ('kernelforge versions' shows its first line)")
    p.add_argument("--sign", metavar="KEY", type=sign_arg,
                   help="sign every variant with this key (a file or a keygen name)")
    p.add_argument("--card", metavar="FILE", type=card_arg,
                   help="a README (markdown) to publish as the repository card, on the "
                        "version branch and on branch main")
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser("versions", help="list a kernel's versions, revisions and variants")
    p.add_argument("repo", type=repo_arg, help="repository id, org/name")
    p.add_argument("--hub", type=hub_arg, help=hub_help)
    p.set_defaults(func=_cmd_versions)

    p = sub.add_parser("demo", help="build, publish, load and check the bundled relu kernel")
    p.add_argument("--hub", type=_local_hub_dir,
                   help="local hub directory to publish to (default: $KERNELFORGE_HUB where "
                        "it names a directory, else the local hub in the user cache); the "
                        "demo never publishes to the Hugging Face Hub")
    p.set_defaults(func=_cmd_demo)

    add_commands(sub)  # info, lock, download, keygen, trust (cli_share.py)
    return parser


def _own_lines(message: str) -> str:
    """An error's or a warning's message as the command writes it: its own lines (and
    tabs, which a compiler's quoted source holds) kept, and in each what the terminal
    would act on (a carriage return that lets the rest overwrite the line, an escape
    sequence) from a name or text the hub chose written as an escape
    (:func:`~kernelforge.errors.one_line`)."""
    return "\n".join("\t".join(one_line(part) for part in line.split("\t"))
                     for line in message.split("\n"))


class _Labelled(logging.Handler):
    """Writes the library's warnings to stderr as the command's own lines are written,
    ``warning: <message>``, to the ``sys.stderr`` of the moment. The label stands for
    the library's :data:`~kernelforge.errors.WARNING_PREFIX`, which it replaces."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage().removeprefix(WARNING_PREFIX)
            print(f"{record.levelname.lower()}: {_own_lines(message)}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(record)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read a command line as :func:`main` does, without running it (the tests read the
    documentation's command lines with it, so that they stay ones the command takes).

    Args:
        argv: the words after ``kernelforge`` (default: ``sys.argv[1:]``).

    Returns:
        The parsed arguments; ``args.func(args)`` runs the command.

    Raises:
        SystemExit: a usage error (exit 2), said with the usage line of the (sub)command
            at fault: an argument it does not take, a malformed value, or arguments that
            do not fit together; or ``--help`` / ``--version`` (exit 0).
    """
    parser = build_parser()
    # Arguments a subcommand does not take are its usage error, not the top level's
    args, extra = parser.parse_known_args(argv)
    if extra:
        words = list(sys.argv[1:] if argv is None else argv)
        command = words.index(args.command) if args.command in words else len(words)
        # an option before the command is the top level's (`kernelforge --verion build`)
        before = any(word in words[:command] for word in extra)
        _unrecognized(parser if before else _innermost(parser, args), extra)
    check_args = getattr(args, "check_args", None)
    if check_args is not None:
        check_args(args)  # checks of one argument against another; usage errors, exit 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kernelforge`` command."""
    args = parse_args(argv)
    # With no handler anywhere, Python prints a library warning bare; with this one it
    # reads as the command's other lines do. A program that set up logging of its own
    # keeps it (no second copy of each warning), and the handler goes when the command
    # ends (main may be called again in one process).
    library = logging.getLogger("kernelforge")
    handler = None if library.hasHandlers() else _Labelled(logging.WARNING)
    if handler is not None:
        library.addHandler(handler)
    try:
        with warnings.catch_warnings():  # the caller's filters come back afterwards
            _quiet_torch_without_numpy()
            return _run(args)
    finally:
        if handler is not None:
            library.removeHandler(handler)


def _quiet_torch_without_numpy() -> None:
    """Leave out the warning torch gives on its import where numpy is not installed
    (torch does not require it): the commands that read the system import torch, and
    its two lines (a path and a source line) would stand among the command's own on
    stderr, about a package the command does not use."""
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy",
                            category=UserWarning)


@contextlib.contextmanager
def _each_line_written() -> Iterator[None]:
    """Write each line of stdout as it is printed while the command runs, into a pipe or
    a file too (a terminal gets that anyway). Held back in Python's buffer, a build's
    progress reached ``| tee`` or a CI log only at its end, a log of both streams
    (``> log 2>&1``) had the ``error:`` lines before the output that came first, and a
    reader that went away (``| head``) before a failure was found only at exit, where
    Python reports it with "Exception ignored" and exit code 120. The stream's own
    setting comes back afterwards (``main`` may be called inside a program)."""
    stream = sys.stdout
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None or getattr(stream, "line_buffering", True):
        yield  # not a text file Python opened (a StringIO), or line buffered already
        return
    reconfigure(line_buffering=True)
    try:
        yield
    finally:
        try:
            reconfigure(line_buffering=False)  # which flushes stdout first
        except BrokenPipeError:
            # The reader went away with output unwritten: the failed flush kept it, and
            # the setting with it. Sent to /dev/null, it is written and the setting
            # comes back; the error still ends the command (exit 141).
            _stdout_to_devnull(stream)
            reconfigure(line_buffering=False)
            raise


def _stdout_to_devnull(stream: TextIO) -> None:
    """Point the file of ``stream`` (stdout) at /dev/null, after its reader went away
    (``| head``): Python flushes stdout again at exit and would fail once more (the
    recipe of the Python documentation, signal module, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; errors the user can act on become one ``error:`` line."""
    try:
        with _each_line_written():  # left before an error line is written, below
            code = int(args.func(args))
        sys.stdout.flush()  # here, so that a closed pipe is handled below, not at exit
        return code
    except KernelforgeError as err:
        print(f"error: {_own_lines(str(err))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly.
        _stdout_to_devnull(sys.stdout)
        return 141
    except OSError as err:
        # What the system refused (a full disk, a folder one may not write, a file that
        # vanished): its message names the file, which is what there is to fix; a
        # traceback would only hide it.
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
