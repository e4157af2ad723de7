"""Checking a build directory before it is published to a hub, and reading a variant's
``metadata.json`` (:func:`read_metadata`, :func:`parse_metadata`), which loads,
downloads, the download cache and the command line use too."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelforge._durable import LEFTOVER_NAME
from kernelforge._parse import json_loads
from kernelforge._paths import path_word
from kernelforge.digest import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    compare,
    is_excluded,
    verify_tree,
)
from kernelforge.errors import HubError, IntegrityError, VariantError

if TYPE_CHECKING:  # pragma: no cover - variants is imported where a build is staged
    from kernelforge.variants import Variant

__all__ = ["BUILDER_CARD", "Staged", "build_file_error", "check_digests", "parse_metadata",
           "publish_integrity_error", "read_metadata", "stage_build", "unbuilt_project"]

#: The card Hugging Face's ``kernel-builder build`` renders into ``build/`` beside the
#: variants (from the project's ``CARD.md`` template); its ``upload`` publishes it as the
#: repository's README. Not a variant: publishing leaves it where it is.
BUILDER_CARD = "CARD.md"


@dataclass(frozen=True)
class Staged:
    """A validated build, ready to copy.

    Attributes:
        files: ``(source file, relpath in the revision)`` pairs, relpaths like
            ``build/torch-cpu/__init__.py``.
        variants: the variant directory names.
        digests: variant -> its metadata ``digest`` block (``{}`` when it has none).
        build_dir: the ``build/`` directory the files come from (for messages).
        unversioned: the variants whose metadata records no ``version``.
    """

    files: tuple[tuple[Path, str], ...]
    variants: tuple[str, ...]
    digests: dict[str, dict[str, Any]]
    build_dir: Path | None = None
    unversioned: tuple[str, ...] = ()


def unbuilt_project(project: str | os.PathLike[str]) -> str:
    """The refusal of a kernel project that has no ``build/`` directory yet, with the fix.

    One text for every command and function that needs a build (``publish``,
    :meth:`~kernelforge.hub.LocalHub.publish`, ``get_local_kernel``).

    Args:
        project: the project directory, as the user gave it.

    Returns:
        ``"<project> is a kernel project without a build/ directory; build it first
        (kernelforge build <project>)"``.
    """
    return (f"{project} is a kernel project without a build/ directory; build it first "
            f"(kernelforge build {shlex.quote(path_word(project))})")


def _rebuild_command(variant_dir: Path) -> str:
    """``kernelforge build <project>`` for a variant of ``<project>/build/``, else the
    bare command (the build directory is not in a kernel project)."""
    project = variant_dir.parent.parent
    return (f"kernelforge build {shlex.quote(path_word(project))}"
            if (project / "build.toml").is_file()
            else "kernelforge build")


def build_file_error(path: Path, err: OSError, staged: Staged) -> HubError:
    """The error for a file of the build that cannot be read while it is published.

    Args:
        path: the file (one of ``staged.files``).
        err: what reading it raised.
        staged: the build being published.

    Returns:
        A :class:`HubError` naming the build's file (not the hub, which is unchanged)
        and the fixes.
    """
    rel = next((r for src, r in staged.files if src == path), None)
    variant_dir = _source_dir(staged, rel.split("/")[1]) if rel else path.parent
    return HubError(
        f"{path}: cannot read this file of the build being published "
        f"({err.strerror or err}); nothing was published. Make it readable, or rebuild "
        f"({_rebuild_command(variant_dir)}), then publish again"
    )


def read_metadata(variant_dir: Path) -> dict[str, Any]:
    """Read and minimally check a variant's ``metadata.json``.

    Args:
        variant_dir: the variant directory.

    Returns:
        The parsed metadata; ``id`` is a Python identifier and ``name`` a string.

    Raises:
        HubError: the file is missing, not JSON, or lacks a usable ``id``/``name``.
    """
    path = variant_dir / "metadata.json"
    if not path.is_file():
        raise HubError(f"{path}: missing; every build variant needs its metadata.json")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise HubError(f"{path}: cannot be read ({err})") from err
    return parse_metadata(data, str(path))


def parse_metadata(data: bytes, where: str) -> dict[str, Any]:
    """Parse and minimally check the bytes of a ``metadata.json``.

    Args:
        data: the file's bytes.
        where: its location, for messages.

    Returns:
        The parsed metadata; ``id`` is a Python identifier and ``name`` a string.

    Raises:
        HubError: not JSON, or without a usable ``id``/``name``/``digest``.
    """
    try:
        meta = json_loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise HubError(f"{where}: not valid JSON ({err})") from err
    if not isinstance(meta, dict):
        raise HubError(f"{where}: expected a JSON object")
    module_id = meta.get("id")
    if not isinstance(module_id, str) or not module_id.isidentifier():
        raise HubError(f"{where}: key 'id' must be a Python identifier, got {module_id!r}")
    if not isinstance(meta.get("name"), str):
        raise HubError(f"{where}: key 'name' is missing or not a string")
    digest = meta.get("digest")
    if digest is not None and (
        not isinstance(digest, dict)
        or digest.get("algorithm") not in ALGORITHMS
        or not isinstance(digest.get("files"), dict)
    ):
        raise HubError(
            f"{where}: key 'digest' must be "
            f"{{\"algorithm\": {' | '.join(ALGORITHMS)}, \"files\": {{path: base64}}}}"
        )
    return meta


def _check_no_variant_set_aside(build_dir: Path) -> None:
    """Refuse a build directory where a build set a variant aside and has not (yet) put
    its new tree in place: publishing it would leave that variant out."""
    for entry in sorted(build_dir.iterdir()):
        m = LEFTOVER_NAME.match(entry.name)
        if m is None or m["old"] is None or (build_dir / m["variant"]).exists():
            continue
        raise HubError(
            f"{build_dir}: variant {m['variant']} is missing; a build set it aside as "
            f"{entry.name} and did not finish (it was interrupted, or it is still running). "
            f"Run 'kernelforge build' on the project again, which puts it back, then publish"
        )


def stage_build(build_dir: Path, version: int) -> Staged:
    """Validate a build directory and list the files to publish.

    Args:
        build_dir: ``build/`` (holding ``<variant>/`` directories) or the project
            directory containing it.
        version: the version being published; each ``metadata.json`` ``version`` must
            equal it (an integer: ``true`` and ``1.0`` are refused) or be absent.

    Returns:
        The :class:`Staged` build.

    Raises:
        HubError: naming the offending path: no variants, a stray file (but
            :data:`BUILDER_CARD`, which is left out), a link, a
            ``.pyc``, a bad variant name, missing or mismatching metadata, or a variant
            directory whose name contradicts its metadata (see
            :func:`_check_name_matches_metadata`).
    """
    if not build_dir.is_dir():
        project = build_dir.parent
        if build_dir.name == "build" and (project / "build.toml").is_file():
            raise HubError(unbuilt_project(project))
        raise HubError(f"build_dir: {build_dir} is not a directory (expected a build/ "
                       "directory, or the project directory holding it)")
    if not any((p / "metadata.json").is_file() for p in build_dir.iterdir() if p.is_dir()):
        if (build_dir / "build").is_dir():  # the project directory was given
            build_dir = build_dir / "build"
        elif (build_dir / "build.toml").is_file():
            raise HubError(unbuilt_project(build_dir))
    files: list[tuple[Path, str]] = []
    variants: list[str] = []
    digests: dict[str, dict[str, Any]] = {}
    unversioned: list[str] = []
    _check_no_variant_set_aside(build_dir)
    for entry in sorted(build_dir.iterdir()):
        # Dot-entries are not variants: a build's staging directories and editor state.
        if entry.name == "__pycache__" or entry.name.startswith("."):
            continue
        if entry.name == BUILDER_CARD and entry.is_file() and not entry.is_symlink():
            continue
        if entry.is_symlink() or not entry.is_dir():
            raise HubError(
                f"{entry}: only variant directories belong in {build_dir}; remove this entry"
            )
        variant = _check_variant_name(entry)
        meta = read_metadata(entry)
        _check_name_matches_metadata(entry, variant, meta)
        _check_binaries_match_the_cpu(entry, variant)
        meta_version = meta.get("version")
        if meta_version is not None and (isinstance(meta_version, bool)
                                         or not isinstance(meta_version, int)):
            # true and 1.0 equal 1, but a load reads them as no version (and refuses such
            # a signed build): refused here rather than published as version 1
            raise HubError(
                f"{entry / 'metadata.json'}: key 'version' must be an integer (the major "
                f"version), got {meta_version!r}; rebuild with 'kernelforge build', or "
                f"write \"version\": {version} there (a load reads any other value as no "
                "version, and refuses a signed build that records none)"
            )
        if meta_version is not None and meta_version != version:
            raise HubError(
                f"{entry / 'metadata.json'}: key 'version' is {meta_version!r} but the build "
                f"is being published as version {version} (branch v{version}); publish it as "
                f"version {meta_version!r} ([general] version = {meta_version!r} in "
                f"build.toml for 'kernelforge publish', version={meta_version!r} in Python), "
                "or rebuild"
            )
        digests[entry.name] = meta.get("digest") or {}
        if meta_version is None:
            unversioned.append(entry.name)
        variants.append(entry.name)
        files.extend(_variant_files(entry, f"build/{entry.name}"))
    if not variants:
        raise HubError(
            f"{build_dir} holds no build variants; build the kernel first "
            "(expected build/<variant>/ directories with a metadata.json)"
        )
    return Staged(tuple(files), tuple(variants), digests, build_dir, tuple(unversioned))


def check_digests(copy_root: Path | None, staged: Staged, recorded: dict[str, str]) -> None:
    """Check the files to publish against each variant's metadata digest, where there is
    one. Every hub checks what it publishes with this, so a changed build is refused in
    the same words everywhere.

    Args:
        copy_root: the directory the revision was copied into; ``None`` when nothing
            was copied (the files are read from ``staged.build_dir``).
        staged: the build.
        recorded: ``{relpath: base64 sha256}`` of the bytes being published (computed
            while copying or reading them).

    Raises:
        IntegrityError: a variant's files do not match its digest (each file named):
            "refusing to publish", with the fix (rebuild it).
    """
    for variant, block in staged.digests.items():
        if not block:
            continue
        expected = block["files"]
        if block["algorithm"] != DEFAULT_ALGORITHM:  # recorded holds sha256: rehash
            try:
                tree = (copy_root / "build" / variant if copy_root is not None
                        else _source_dir(staged, variant))
                verify_tree(tree, expected, algorithm=block["algorithm"])
            except IntegrityError as err:
                raise publish_integrity_error(_source_dir(staged, variant),
                                              err.problems) from None
            continue
        prefix = f"build/{variant}/"
        actual = {
            k[len(prefix):]: v
            for k, v in recorded.items()
            if k.startswith(prefix) and not is_excluded(k[len(prefix):])
        }
        problems = compare(actual, expected)
        if problems:
            raise publish_integrity_error(_source_dir(staged, variant), problems)


def _source_dir(staged: Staged, variant: str) -> Path:
    return (staged.build_dir or Path("build")) / variant


def publish_integrity_error(variant_dir: Path, problems: list[str]) -> IntegrityError:
    """The error refusing to publish a variant whose files do not match its digest.

    Args:
        variant_dir: the variant directory being published (``<project>/build/<v>``).
        problems: what :func:`~kernelforge.digest.compare` found, one line each.

    Returns:
        An :class:`~kernelforge.errors.IntegrityError` that says "refusing to publish"
        (not "load") and names the fix: rebuild the project.
    """
    err = IntegrityError(variant_dir, problems)
    how = _rebuild_command(variant_dir)
    err.args = (
        f"refusing to publish {variant_dir}: its files do not match the digests its "
        "metadata.json records (they changed after the build):\n"
        + "\n".join(f"  {p}" for p in problems)
        + f"\nrebuild it ({how}), then publish again",
    )
    return err


def _check_variant_name(entry: Path) -> Variant:
    """The variant ``entry``'s name denotes; refuses a name that is not a variant name."""
    from kernelforge.variants import Variant

    try:
        return Variant.parse(entry.name)
    except VariantError as err:
        raise HubError(f"{entry}: {err}; fix: remove it from {entry.parent.name}/ or move it "
                       "elsewhere: publish takes every directory there for a variant") from err


# --- the name against the metadata ------------------------------------------------------
#
# The loader chooses a variant by its directory name alone, so a build under the wrong
# name (a CPU build renamed ...-cu128-..., a copy renamed for another torch) would load
# where it does not fit. metadata.json records some of the facts the name encodes:
# ``backend.type`` (every builder: kernelforge and Hugging Face's kernel-builder) and,
# from kernelforge, ``provenance.torch``, the version of the torch built against
# ("2.9.0+cu128"). Only those facts are compared, and only where they are recorded: a
# fact the metadata leaves out (Hugging Face's builds, older ones) is never a
# contradiction. The C++ ABI, the CPU and the OS are not recorded by any builder: the
# CPU is checked from the ELF header of a Linux variant's libraries instead, the C++ ABI
# and the OS are not. A pure-Python torch-<backend> directory is compared on its backend.

_TORCH_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?!\d)", re.ASCII)  # "2.10.0+cpu" is 2.10
# Local version tags of the torch wheels that name the backend torch is built for:
# +cu128 is CUDA 12.8 (the last digit is the minor, as in variant names), +rocm6.3 ROCm 6.3.
_TORCH_LOCAL_RE = (
    ("cuda", re.compile(r"cu(\d+)(\d)", re.ASCII)),
    ("rocm", re.compile(r"rocm(\d+)\.(\d+)(?:\.\d+)*", re.ASCII)),
)


def _metadata_backend(meta: dict[str, Any]) -> str | None:
    """``backend.type`` of a metadata.json when it is a backend kernelforge knows."""
    from kernelforge.variants import noarch_variant

    block = meta.get("backend")
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        return None
    try:  # as a torch-<backend> directory names it (Ascend builds say "npu" for cann)
        return noarch_variant(kind).backend
    except VariantError:
        return None


def _metadata_torch(meta: dict[str, Any]) -> tuple[str, tuple[int, int],
                                                    tuple[str, tuple[int, int]] | None] | None:
    """``provenance.torch`` (what kernelforge records): ``(text, (major, minor),
    (backend, version) from its local tag or None)``; ``None`` when it is not recorded
    or cannot be read."""
    prov = meta.get("provenance")
    text = prov.get("torch") if isinstance(prov, dict) else None
    if not isinstance(text, str):
        return None
    m = _TORCH_VERSION_RE.match(text.strip())
    if m is None:
        return None
    tagged: tuple[str, tuple[int, int]] | None = None
    for backend, pattern in _TORCH_LOCAL_RE:
        local = pattern.fullmatch(text.strip().partition("+")[2])
        if local is not None:
            tagged = backend, (int(local[1]), int(local[2]))
    return text, (int(m[1]), int(m[2])), tagged


def _ver(version: tuple[int, int] | None) -> str:
    return "?" if version is None else f"{version[0]}.{version[1]}"


def _implied_name(variant: Variant, backend: str, bver: tuple[int, int] | None,
                  torch: tuple[int, int] | None) -> str | None:
    """The name of the compiled ``variant`` with its metadata's facts in place of the
    name's; ``<MAJ><MIN>`` stands for a backend version the metadata does not record.
    ``None`` when there is no such name."""
    from kernelforge.variants import Variant

    version = torch if torch is not None else variant.version
    fields = (variant.kind, version, variant.cxx11, backend)
    try:
        return str(Variant(*fields, bver, variant.cpu, variant.os))
    except VariantError:  # a versioned backend without its version: show where it goes
        pass
    try:
        named = Variant(*fields, (1, 0), variant.cpu, variant.os)
    except VariantError:
        return None
    tag = named.compute or ""
    return str(named).replace(f"-{tag}-", f"-{tag[:-2]}<MAJ><MIN>-", 1)


def _check_noarch_backend(entry: Path, variant: Variant, meta: dict[str, Any]) -> None:
    """Refuse a ``torch-<backend>`` directory whose ``backend.type`` names another backend
    (a ``torch-cpu`` build renamed ``torch-cuda`` would load on CUDA machines only)."""
    from kernelforge.variants import noarch_variant

    meta_backend = _metadata_backend(meta)
    if meta_backend is None or meta_backend == variant.backend:
        return
    implied = str(noarch_variant(meta_backend))
    where = (f"{implied}, the name its metadata.json implies, is already a directory beside "
             "it, so this one is probably a renamed copy: remove it" if
             (entry.parent / implied).exists() else
             f"Rename the directory to {implied}, the name its metadata.json implies")
    raise HubError(
        f"{entry}: the directory name {entry.name} contradicts its metadata.json:\n"
        f"  backend: the name says {variant.backend}, metadata.json says {meta_backend} "
        "(backend.type)\nThe loader chooses a variant by its directory name alone, so this "
        f"build would load where it does not fit; nothing was published. {where}, or "
        f"rebuild it ({_rebuild_command(entry)}), then publish again"
    )


def _check_name_matches_metadata(entry: Path, variant: Variant, meta: dict[str, Any]) -> None:
    """Refuse a compiled variant directory whose name contradicts what its
    ``metadata.json`` records: the backend (``backend.type``); for a ``torch<MAJ><MIN>``
    build the torch major.minor (``provenance.torch``); for a torch build for CUDA or
    ROCm the backend version (the ``+cu128``/``+rocm6.3`` tag of ``provenance.torch``,
    the version such a build is named for). Facts the metadata does not record are not
    compared.

    A pure-Python ``torch-<backend>`` directory is compared on its backend alone;
    ``torch-universal`` fits any backend and is not checked.
    """
    from kernelforge.variants import BACKEND_LABELS, VariantKind

    if variant.kind is VariantKind.UNIVERSAL:
        return
    if variant.kind is VariantKind.NOARCH:
        _check_noarch_backend(entry, variant, meta)
        return
    problems: list[str] = []
    backend = variant.backend or ""
    meta_backend = _metadata_backend(meta)
    if meta_backend is not None and meta_backend != variant.backend:
        said = (variant.backend if variant.compute == variant.backend
                else f"{variant.backend} ({variant.compute})")
        problems.append(f"backend: the name says {said}, metadata.json says {meta_backend} "
                        "(backend.type)")
        backend = meta_backend
    torch: tuple[int, int] | None = None
    bver = variant.backend_version if backend == variant.backend else None
    torch_facts = _metadata_torch(meta)
    if torch_facts is not None:
        text, torch_mm, tagged = torch_facts
        if variant.kind is VariantKind.ARCH:  # (a stable-ABI name gives the ABI, not torch)
            torch = torch_mm
            if torch_mm != variant.version:
                problems.append(f"torch: the name says {_ver(variant.version)}, metadata.json "
                                f"says {text} (provenance.torch)")
        # tvm-ffi builds need no torch: the torch beside them says nothing of their CUDA
        if tagged is not None and tagged[0] == backend and variant.kind is not VariantKind.TVM_FFI:
            if backend == variant.backend and tagged[1] != variant.backend_version:
                label = BACKEND_LABELS[backend]
                problems.append(
                    f"{label} version: the name says {_ver(variant.backend_version)} "
                    f"({variant.compute}), metadata.json says {_ver(tagged[1])} (it was built "
                    f"with torch {text}, a {label} {_ver(tagged[1])} build; provenance.torch)"
                )
            bver = tagged[1]
    if not problems:
        return
    rebuild = _rebuild_command(entry)
    implied = _implied_name(variant, backend, bver, torch)
    if implied is None:
        fix = f"Rebuild it ({rebuild})"
    elif (entry.parent / implied).exists():
        fix = (f"{implied}, the name its metadata.json implies, is already a directory "
               f"beside it, so this one is probably a renamed copy: remove it, or rebuild "
               f"({rebuild})")
    else:
        notes = []
        if "<MAJ><MIN>" in implied:
            notes.append(f"<MAJ><MIN> is the {BACKEND_LABELS.get(backend, backend)} version it was "
                         "built for, which metadata.json does not record")
        either = " either" if notes else ""
        notes.append(f"metadata.json does not record the CPU and OS{either}, so keep "
                     f"-{variant.cpu}-{variant.os} only if it was built for them")
        fix = (f"Rename the directory to {implied}, the name its metadata.json implies "
               f"({'; '.join(notes)}), or rebuild it ({rebuild})")
    raise HubError(
        f"{entry}: the directory name {entry.name} contradicts its metadata.json:\n"
        + "\n".join(f"  {p}" for p in problems)
        + "\nThe loader chooses a variant by its directory name alone, so this build would "
        f"load where it does not fit; nothing was published. {fix}, then publish again"
    )


#: ELF ``e_machine`` values of the CPUs Linux variant names give.
_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}


def _elf_cpu(path: Path) -> str | None:
    """The CPU a little-endian ELF file was built for (``x86_64``, ``aarch64``); ``None``
    for a file that is no such ELF file or names another machine."""
    try:
        with path.open("rb") as fh:
            head = fh.read(20)
    except OSError:
        return None  # unreadable: the copy into the hub reports it, naming the file
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:  # EI_DATA: little-endian
        return None
    return _ELF_MACHINES.get(int.from_bytes(head[18:20], "little"))


def _check_binaries_match_the_cpu(entry: Path, variant: Variant) -> None:
    """Refuse a Linux variant holding a shared library built for another CPU than its
    name gives (an x86_64 build copied to an ``-aarch64-linux`` directory): the loader
    would choose it on that CPU, where the library cannot load. metadata.json records no
    CPU, but every ELF file does."""
    if variant.os != "linux" or variant.cpu not in _ELF_MACHINES.values():
        return
    for path in sorted(entry.rglob("*.so")):
        cpu = _elf_cpu(path) if path.is_file() and not path.is_symlink() else None
        if cpu is not None and cpu != variant.cpu:
            implied = entry.name.replace(f"-{variant.cpu}-linux", f"-{cpu}-linux")
            raise HubError(
                f"{path}: this shared library is built for {cpu}, but its variant "
                f"directory {entry.name} says {variant.cpu}; the loader would choose it on "
                f"{variant.cpu} machines, where it cannot load. Nothing was published; "
                f"rename the directory to {implied} if that is the build, or build the "
                f"kernel on (or for) {variant.cpu}, then publish again"
            )


def _variant_files(variant_dir: Path, prefix: str) -> Iterator[tuple[Path, str]]:
    """Files of one variant, refusing links, special files and stray bytecode.

    ``__pycache__`` directories (written when the build was imported locally) are
    import caches, not part of the build: they are skipped, never published.
    """
    for dirpath, dirnames, filenames in os.walk(variant_dir):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for d in dirnames:
            if (here / d).is_symlink():
                raise HubError(f"{here / d}: symbolic links cannot be published; copy the files")
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink() or not path.is_file():
                raise HubError(f"{path}: only regular files can be published (no links)")
            if name.endswith(".pyc"):
                raise HubError(
                    f"{path}: compiled bytecode (.pyc) must not ship; delete it (the .py "
                    "sources are what gets published)"
                )
            yield path, f"{prefix}/{path.relative_to(variant_dir).as_posix()}"
