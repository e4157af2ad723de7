"""Path arguments given empty: ``kernelforge build "$PROJECT"`` with the variable unset.

Read as a path, an empty string is the current directory, so each of these would check,
build, publish, lock, write or delete there (or read as the option left out). Every path
argument of the command line and of the public functions refuses it, naming the
argument and what to pass instead; an empty or blank path variable counts as unset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kf_testutil import write_noarch_project

from kernelforge.cli import main

BLANKS = ("", " ", "\t")
HERE = "('.' for the current directory)"


def _why(what: str, give: str, would: str = "mean the current directory") -> str:
    return f"an empty path is not {what} (it would {would}); pass {give}"


PROJECT = _why("a kernel project", f"the project directory {HERE} or its build.toml")
HUB = _why("a hub", f"a hub directory {HERE}, 'hf' for the Hugging Face Hub")
LOCK = _why("a lock file", f"the lock file, or the project directory holding one {HERE}")
LOCK_PROJECT = _why("a project", f"the project directory holding pyproject.toml {HERE}, or "
                                 "its pyproject.toml")
CACHE = _why("a download cache", f"the download cache's directory {HERE}")

#: (command line, the argument argparse names, the refusal after "argument X: '<blank>': ")
#: with B where the empty path goes.
CLI_CASES: list[tuple[list[str], str, str]] = [
    (["check", "B"], "path", PROJECT),
    (["build", "B"], "path", PROJECT),
    (["build", ".", "--python", "B"], "--python",
     _why("a Python interpreter", "the path of the environment's python, or leave --python "
          "out to build for this one")),
    (["publish", "B"], "path", PROJECT),
    (["publish", ".", "--sign", "B"], "--sign",
     _why("a signing key", "the signing key's file or its 'kernelforge keygen' name, or leave "
          "--sign out to publish unsigned", would="read as --sign left out")),
    (["publish", ".", "--card", "B"], "--card",
     _why("a card file", "the README file to publish as the repository card, or leave --card "
          "out to publish none", would="read as --card left out")),
    *(([*cmd, "--hub", "B"], "--hub",
       f"{HUB}, or leave --hub out for the default hub (--help says which)")
      for cmd in (["publish", "."], ["versions", "me/k"], ["info", "me/k"], ["lock"],
                  ["download"], ["demo"])),
    (["info", "me/k", "--lock", "B"], "--lock",
     f"{LOCK}, or leave --lock out to describe what a load picks without a lock"),
    (["lock", "B"], "path", LOCK_PROJECT),
    (["download", "B"], "path", LOCK),
    (["init", "my-relu", "B"], "directory",
     _why("a project directory", f"the directory to create the project in {HERE}, or leave "
          "DIR out for ./NAME", would="read as DIR left out")),
    *(([*cmd, "--cache", "B"], "--cache",
       f"{CACHE}, or leave --cache out for the default (--help says which)")
      for cmd in (["cache", "list"], ["cache", "remove", "me/k"], ["cache", "clear"])),
    (["keygen", "--out", "B"], "--out",
     _why("a key file", "the private key's file path, or leave --out out for keys/NAME.pem in "
          "the config directory", would="read as --out left out")),
    (["trust", "add", "B"], "key",
     _why("a public key file", "the publisher's public key, 'ed25519:<base64>', or its .pub "
          "file")),
]


@pytest.fixture
def project_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current directory: a kernel project (which an empty path would name), with a
    pyproject.toml, so that a command that read it would act on it."""
    root = write_noarch_project(tmp_path / "here")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "here"\n\n[tool.kernelforge.dependencies]\n"me/k" = 1\n')
    monkeypatch.chdir(root)
    return root


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize(("argv", "argument", "message"), CLI_CASES,
                         ids=[" ".join(c[0]) for c in CLI_CASES])
def test_the_command_line_refuses_an_empty_path(
        argv: list[str], argument: str, message: str, blank: str, project_here: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _listing(project_here)
    with pytest.raises(SystemExit) as usage:
        main([blank if word == "B" else word for word in argv])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {argument}: {blank!r}: {message}\n" in err, err
    assert _listing(project_here) == before  # nothing checked, built or written here


def _api_cases() -> list[tuple[str, Callable[[str], Any], str]]:
    """(the call, a function of the blank path making it, the refusal's start)."""
    from kernelforge import (
        HfHub,
        LocalHub,
        build_project,
        download_locked,
        get_kernel,
        get_local_kernel,
        get_locked_kernel,
        has_kernel,
        kernel_info,
        load_kernel,
        load_manifest,
        load_variant,
        lock_project,
    )
    from kernelforge.cache import DownloadCache
    from kernelforge.hub import as_hub
    from kernelforge.manifest import check_project
    from kernelforge.scaffold import init_project

    default_cache = ", or nothing (None in Python) for the default: $KERNELFORGE_CACHE"
    # None is a hub object's default (a publish's) there, and a load's here
    made = f"hub: {HUB}, or nothing (None in Python) for the default: $KERNELFORGE_HUB, else " \
        "the local hub in the user cache"
    loads = f"hub: {HUB}, or nothing (None in Python) for the default: $KERNELFORGE_HUB, else " \
        "the local hub when it holds the repository, else the Hugging Face Hub"
    return [
        ("load_manifest", lambda b: load_manifest(b), f"path: {PROJECT}"),
        ("check_project", lambda b: check_project(b), f"path: {PROJECT}"),
        ("build_project", lambda b: build_project(b), f"path: {PROJECT}"),
        ("build_project(out_dir=)", lambda b: build_project(".", out_dir=b),
         "out_dir: " + _why("an output directory", f"the directory for the variants {HERE}, "
                            "or nothing (None in Python) for the project's build/")),
        ("build_project(python=)", lambda b: build_project(".", python=b),
         "python: " + _why("a Python interpreter", "the path of the environment's python, or "
                           "nothing (None in Python) to build for this one")),
        ("lock_project", lambda b: lock_project(b), f"project: {LOCK_PROJECT}"),
        ("download_locked", lambda b: download_locked(b), f"lockfile: {LOCK}"),
        ("get_locked_kernel", lambda b: get_locked_kernel("me/k", lockfile=b),
         f"lockfile: {LOCK}"),
        ("load_kernel", lambda b: load_kernel("me/k", lockfile=b), f"lockfile: {LOCK}"),
        ("kernel_info(lockfile=)", lambda b: kernel_info("me/k", lockfile=b),
         f"lockfile: {LOCK}"),
        ("get_local_kernel", lambda b: get_local_kernel(b),
         "repo_path: " + _why("a build", f"the project directory holding build/ {HERE}, its "
                              "build/ directory or one variant directory")),
        ("load_variant", lambda b: load_variant(b),
         "variant_dir: " + _why("a variant directory", f"a build/<variant> directory {HERE}")),
        ("LocalHub", lambda b: LocalHub(b), made),
        ("as_hub", lambda b: as_hub(b), made),
        ("get_kernel(hub=)", lambda b: get_kernel("me/k", hub=b), loads),
        ("has_kernel(hub=)", lambda b: has_kernel("me/k", hub=b), loads),
        ("kernel_info(hub=)", lambda b: kernel_info("me/k", hub=b), loads),
        ("LocalHub.publish", lambda b: LocalHub(Path("hub").absolute()).publish(
            "me/k", b, version=1),
         "build_dir: " + _why("a build", "the project's build/ directory, or the project "
                              f"directory holding it {HERE}")),
        ("HfHub(cache=)", lambda b: HfHub(cache=b), f"cache: {CACHE}{default_cache}"),
        ("DownloadCache", lambda b: DownloadCache(b), f"root: {CACHE}{default_cache}"),
        ("init_project", lambda b: init_project("my-relu", b),
         "directory: " + _why("a project directory", "the directory to create the project "
                              f"in {HERE}, or nothing (None in Python) for ./NAME")),
    ]


API_CASES = _api_cases()


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize(("call", "make", "message"), API_CASES, ids=[c[0] for c in API_CASES])
def test_the_python_api_refuses_an_empty_path(
        call: str, make: Callable[[str], Any], message: str, blank: str,
        project_here: Path) -> None:
    before = _listing(project_here)
    with pytest.raises(ValueError) as refused:
        make(blank)
    assert str(refused.value).startswith(message), str(refused.value)
    assert _listing(project_here) == before


def test_dot_still_names_the_current_directory(
        project_here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal is of the empty string only: "." (and a left-out PATH) is the project
    here, as before."""
    from kernelforge import load_manifest

    assert load_manifest(".").name == "na"
    for argv in (["check", "."], ["check"]):
        assert main(argv) == 0
        assert capsys.readouterr().out.startswith("build.toml: ok\n  name na,")


@pytest.mark.parametrize("blank", BLANKS)
def test_an_empty_path_variable_counts_as_unset(
        blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KERNELFORGE_HUB, KERNELFORGE_CACHE and KERNELFORGE_CONFIG set empty or blank
    (``KERNELFORGE_CACHE= kernelforge ...``) give the user folders' defaults, as unset
    ones do, never a folder named by the blanks in the current directory."""
    from kernelforge.cache import default_cache_root
    from kernelforge.hub.local import default_root
    from kernelforge.trust import config_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    defaults = {"KERNELFORGE_HUB": (default_root, tmp_path / "cache" / "kernelforge" / "hub"),
                "KERNELFORGE_CACHE": (default_cache_root,
                                      tmp_path / "cache" / "kernelforge" / "downloads"),
                "KERNELFORGE_CONFIG": (config_dir, tmp_path / "config" / "kernelforge")}
    for variable, (read, expected) in defaults.items():
        monkeypatch.delenv(variable, raising=False)
        assert read() == expected, variable
        monkeypatch.setenv(variable, blank)
        assert read() == expected, variable
        monkeypatch.setenv(variable, str(tmp_path / "set"))  # and a set one still counts
        assert read() == tmp_path / "set", variable


def test_a_folder_named_only_with_blanks_is_named_with_dot_slash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A folder whose name is only blanks, made on purpose, is named './ ': the refusal of
    ' ' says so, and the commands kernelforge prints name it so, since the same command
    would refuse ' ' as empty."""
    import shlex

    from kernelforge import LocalHub, load_manifest
    from kernelforge.cache import DownloadCache
    from kernelforge.errors import HubError

    monkeypatch.chdir(tmp_path)
    assert main(["init", "my-relu", "./ "]) == 0
    out = capsys.readouterr().out
    assert "next: kernelforge build './ ' && kernelforge publish './ ' " in out, out
    build = shlex.split(out.split("next: ")[1])
    assert main(["check", build[2]]) == 0  # the command printed runs
    assert capsys.readouterr().out.startswith(" /build.toml: ok\n")
    hint = "; to name the entry ' ' that is here, pass './ '"
    with pytest.raises(SystemExit):
        main(["check", " "])
    assert capsys.readouterr().err.endswith(f"{PROJECT}{hint}\n")
    with pytest.raises(ValueError, match=f"{hint}$"):
        load_manifest(" ")
    with pytest.raises(ValueError, match=f"{hint}$"):
        LocalHub(" ")
    # a second init there names the project's build so too
    assert main(["init", "my-relu", "./ "]) == 1
    assert "run 'kernelforge build './ ''; to start" in capsys.readouterr().err
    # as do the commands for a hub or download cache kept in such a folder
    (tmp_path / "  ").mkdir()
    with pytest.raises(HubError, match="--hub './  ''"):
        LocalHub("./  ").resolve("me/k", "main")
    assert DownloadCache("./  ").remove_command("me/k", "0" * 40).endswith(" --cache './  ''")
    # where no such entry is, the refusal says no more than for an empty path
    (tmp_path / " ").rename(tmp_path / "elsewhere")
    with pytest.raises(ValueError) as refused:
        load_manifest(" ")
    assert str(refused.value) == f"path: {PROJECT}"
