"""The `kernelforge` command's messages and help, as a first-time user meets them: each
says what happened (no warning about a publish that is then refused, no Python names in
a command's error) and what to do."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_cli import _build_arguments, _current_sources, _fake_build

from kernelforge.cli import main
from kernelforge.hub import LocalHub

# --- publish: the stale-build warning holds for what happened ---------------------------------


@pytest.fixture
def project(unbuilt: Path) -> Path:
    return unbuilt


def test_a_refused_publish_says_nothing_of_what_it_would_publish(
        project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A version bumped in build.toml without a rebuild: the hub refuses the build (its
    metadata says version 1), so no "this publishes ... as it was built" before it."""
    _fake_build(project, _current_sources(project))
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace("version = 1\n", "version = 2\n", 1))
    assert main(["publish", str(project), "--repo", "me/k", "--hub", str(tmp_path / "h")]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("error: "), captured.err
    assert "key 'version' is 1 but the build is being published as version 2" in captured.err
    assert "warning" not in captured.err and "as it was built" not in captured.err
    assert captured.out == ""


def test_a_publish_of_a_build_of_other_files_warns_after_it(
        project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_build(project, _current_sources(project))
    (project / "README.md").write_text("# k-one\n")
    argv = ["publish", str(project), "--repo", "me/k", "--hub", str(tmp_path / "h")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("published me/k version 1")
    assert (f": published torch-cpu as it was built; to publish the current files, run "
            f"'kernelforge build {project}' (the variant gets a new uid), then publish "
            "again\n") in captured.err, captured.err
    assert main(argv) == 0  # the same build again: nothing new is published
    captured = capsys.readouterr()
    assert captured.out.startswith("unchanged: me/k version 1")
    assert ": the hub already holds torch-cpu as it was built;" in captured.err


def test_a_publish_without_a_repository_shows_the_command_with_one(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _fake_build(project, _current_sources(project))
    monkeypatch.chdir(project.parent)
    assert main(["publish", project.name, "--hub", str(tmp_path / "h")]) == 1
    assert capsys.readouterr().err == (
        "error: publish needs a repository: pass --repo org/name, e.g. 'kernelforge "
        f"publish {project.name} --repo <org>/k-one' (or set [general.hub] repo-id in "
        "build.toml)\n")
    assert not (tmp_path / "h").exists()


# --- init ----------------------------------------------------------------------------------


def test_init_writes_build_toml_without_a_double_blank_line(tmp_path: Path) -> None:
    """The example's [general.hub] table is removed with its blank line, not leaving two."""
    assert main(["init", "ab", str(tmp_path / "ab")]) == 0
    text = (tmp_path / "ab" / "build.toml").read_text()
    assert "[general.hub]" not in text and "repo-id" not in text
    assert "\n\n\n" not in text, text
    assert "]\n\n[torch]\n" in text


@pytest.mark.parametrize("argv", [["init", "-x"], ["init"]])
def test_init_without_a_name_says_a_name_cannot_start_with_a_dash(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kernelforge init "), err
    assert ("kernelforge init: error: the following arguments are required: name (give the "
            "kernel's name, e.g. 'kernelforge init my-relu'; a name starts with a lowercase "
            "letter: one starting with '-' is read as an option)") in err


def test_init_other_usage_errors_are_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["init", "ab", "d", "extra"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: extra" in err and "a name starts" not in err


# --- build: --arch that does not fit is a usage error of build ------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--arch", "9.0a", "--arch", "gfx942"],
     "--arch mixes CUDA capabilities (9.0a) and ROCm archs (gfx942)"),
    (["--backend", "cuda", "--arch", "gfx942"],
     "--arch gfx942: --backend cuda takes CUDA capabilities"),
    (["--arch", "gfx942", "--backend", "cuda"],
     "--arch gfx942: --backend cuda takes CUDA capabilities"),
    (["--arch", "9.0a", "--backend", "cpu", "--backend", "rocm"],
     "--arch 9.0a: --backend rocm takes ROCm archs"),
])
def test_arch_that_does_not_fit_prints_builds_usage(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["build", ".", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kernelforge build "), err
    assert f"kernelforge build: error: {message}" in err


def test_backend_and_arch_still_reach_the_build(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    seen = _build_arguments(monkeypatch)
    assert main(["build", str(tmp_path), "--backend", "cuda", "--arch", "9.0a",
                 "--backend", "cpu", "--arch", "10.0"]) == 0
    assert seen["backends"] == ["cuda", "cpu"] and seen["archs"] == ["9.0a", "10.0"]
    assert main(["build", str(tmp_path)]) == 0
    assert seen["backends"] is None and seen["archs"] is None


# --- --help ----------------------------------------------------------------------------------


def _help(argv: list[str], monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # no line breaks inside an option's help
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_gives_defaults_and_describes_positionals(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge import trust

    assert "path the project directory, holding pyproject.toml (default: .)" in _help(
        ["lock"], monkeypatch, capsys)
    assert ("path a lock file, or the project directory holding one, or its pyproject.toml "
            "(default: .)") in _help(
        ["download"], monkeypatch, capsys)
    assert "key the publisher's public key, 'ed25519:<base64>'" in _help(
        ["trust", "add"], monkeypatch, capsys)
    assert "what a key id (or its first 8 or more hex digits), a key's name (when one key " \
        "has it) or public key (ed25519:...), a sigstore identity (removed under every " \
        "issuer) or an allowed repository pattern" in _help(["trust", "remove"], monkeypatch,
                                                           capsys)
    out = _help(["trust", "add-sigstore"], monkeypatch, capsys)
    assert "identity the signer's certificate identity: for GitHub Actions the workflow URI" \
        in out
    assert (f"--issuer ISSUER the OIDC issuer of the identity, an https:// URL (default: "
            f"{trust.GITHUB_ISSUER}, GitHub Actions)") in out


@pytest.mark.parametrize("recorded", ["hf", "local"])
def test_the_hub_help_of_download_and_info_lock_says_the_lock_decides(
        recorded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With no --hub, a lock entry's recorded kind of hub decides where download and
    info --lock look, whatever $KERNELFORGE_HUB says: the help says that, not the
    default of a load by name ($KERNELFORGE_HUB first)."""
    from kernelforge.hub.hf import HfHub
    from kernelforge.locate import hub_for

    # what hub_for_lock takes for an entry that records a hub
    monkeypatch.setenv("KERNELFORGE_HUB", "hf" if recorded == "local" else str(tmp_path))
    h = hub_for(None, "me/k", prefer=recorded)
    assert isinstance(h, LocalHub if recorded == "local" else HfHub)
    by_name = "(default: $KERNELFORGE_HUB, else the local hub when it holds the repository"
    locked = ("the kind of hub the lock records for each kernel: hf, or the local hub "
              "($KERNELFORGE_HUB when it names a directory, else the user cache's); a "
              "kernels.lock records none: hf when $KERNELFORGE_HUB is hf, else the local hub "
              "when it holds the locked commit, else hf)")
    out = _help(["download"], monkeypatch, capsys)
    assert f"(default: {locked}" in out and by_name not in out, out
    out = _help(["info"], monkeypatch, capsys)
    assert f"{by_name}, else hf; with --lock: {locked}" in out, out


def test_build_help_lists_the_backends_build_takes(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.build import COMPILED_BACKENDS
    from kernelforge.manifest import BACKENDS

    out = _help(["build"], monkeypatch, capsys)
    m = re.search(r"--backend BACKEND build only this backend \(repeatable\): (.*?), one the "
                  r"project has kernels for; a noarch project packages any backend it lists "
                  r"\((.*?)\)", out)
    assert m is not None, out
    assert m[1].replace(" or ", ", ").split(", ") == list(COMPILED_BACKENDS)
    assert m[2].split(", ") == sorted(BACKENDS)


# --- no Python in the command's words ------------------------------------------------------


@pytest.mark.parametrize("argv", [["publish", "."], ["info", "me/k"], ["demo"]])
def test_an_empty_hub_says_leave_the_option_out(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--hub", ""])
    err = capsys.readouterr().err
    assert ("argument --hub: '': an empty path is not a hub (it would mean the current "
            "directory); pass a hub directory ('.' for the current directory), 'hf' for the "
            "Hugging Face Hub, or leave --hub out for the default hub (--help says which)\n"
            ) in err, err
    assert "Python" not in err and "None" not in err


@pytest.mark.parametrize("argv", [["info", "me/k"], ["download", "."]])
def test_an_unknown_backend_is_a_usage_error_naming_the_option(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """As every malformed argument: exit 2 with the command's usage, naming --backend
    (not the Python argument 'backend'), before any hub or lock file is read."""
    with pytest.raises(SystemExit) as info:
        main([*argv, "--backend", "CPU"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: kernelforge {argv[0]}" in err
    assert ("argument --backend: unknown backend 'CPU'; expected one of cuda, rocm, xpu, "
            "metal, cpu, cann, neuron, tpu (did you mean 'cpu'?)") in err, err


@pytest.fixture
def someone_elses_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         cpu_system: None) -> Path:
    """A hub holding me/k, published under another user's config (so neither owned, nor
    signed, nor allowed for the user running the test)."""
    from kf_testutil import write_metadata

    vdir = tmp_path / "b" / "build" / "torch-cpu"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_k_cpu_0000001")
    hub = LocalHub(tmp_path / "hub")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "publisher"))
    hub.publish("me/k", vdir.parent, version=1)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "user"))
    return hub.root


def test_a_refusal_offers_trusting_a_key_as_the_signature_allows(
        someone_elses_kernel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge import loader
    from kernelforge.errors import TrustError
    from kernelforge.signing import generate_key

    with pytest.raises(TrustError) as info:
        loader.get_kernel("me/k", hub=someone_elses_kernel)
    assert "no signature" in str(info.value)
    assert "To load it: have its publisher sign it (kernelforge publish --sign) and trust " \
        "that key (kernelforge trust add KEY --repo 'ORG/*')" in str(info.value)
    # signed by a key the user does not trust: trusting that key is the way
    key = generate_key(tmp_path / "publisher.pem")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "publisher"))
    LocalHub(someone_elses_kernel).publish("me/k", tmp_path / "b" / "build", version=1,
                                           signer=key)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "user"))
    with pytest.raises(TrustError) as info:
        loader.get_kernel("me/k", hub=someone_elses_kernel, revision="v1")
    assert f"signed by key {key.public.key_id}" in str(info.value)
    assert "To load it: trust its publisher's key (kernelforge trust add KEY --repo " \
        "'ORG/*')" in str(info.value)
    assert main(["info", "me/k", "--hub", str(someone_elses_kernel)]) == 1
    out = capsys.readouterr().out
    assert "\nto load it: trust its publisher's key (kernelforge trust add KEY --repo 'me/*')" \
        in out


def test_a_refusal_of_a_sigstore_signed_build_offers_trusting_its_identity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_system: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A build that carries a sigstore bundle and no .sig is vouched for by trusting the
    bundle's sigstore identity: the load's error and info offer 'trust add-sigstore',
    not 'trust add KEY', which no key of this build could satisfy."""
    from kf_testutil import write_metadata

    from kernelforge import loader
    from kernelforge.errors import TrustError

    vdir = tmp_path / "b" / "build" / "torch-cpu"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_k_cpu_0000002")
    (vdir / "metadata.json.sigstore").write_text("{}")  # Hugging Face's layout
    hub = LocalHub(tmp_path / "hub")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "publisher"))
    hub.publish("me/k", vdir.parent, version=1)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "user"))
    with pytest.raises(TrustError) as info:
        loader.get_kernel("me/k", hub=hub)
    said = str(info.value)
    assert "To load it: trust the sigstore identity that signed it (kernelforge trust " \
        "add-sigstore IDENTITY --repo 'ORG/*'), allow the repository" in said, said
    assert "trust add KEY" not in said and "publish --sign" not in said, said
    assert main(["info", "me/k", "--hub", str(hub.root)]) == 1
    out = capsys.readouterr().out
    assert "\nto load it: trust the sigstore identity that signed it (kernelforge trust " \
        "add-sigstore IDENTITY --repo 'me/*'), allow the repository" in out, out
    assert "trust add KEY" not in out, out


def test_info_names_the_options_that_allowed_the_kernel(
        someone_elses_kernel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["info", "me/k", "--hub", str(someone_elses_kernel)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "\ntrust: refused, " in out
    # and how to let it load, as the load's own error says
    # unsigned: trusting a key lifts nothing until its publisher signs it
    assert out.endswith("\nto load it: have its publisher sign it (kernelforge publish --sign) "
                        "and trust that key (kernelforge trust add KEY --repo 'me/*'), allow "
                        "the repository (kernelforge trust allow me/k), or allow it for one "
                        "command (--trust-remote-code, or --allow me/k)\n")
    assert main([*argv, "--allow", "me/k"]) == 0
    out = capsys.readouterr().out
    assert "\ntrust: allowed by --allow" in out, out
    assert main([*argv, "--trust-remote-code"]) == 0
    out = capsys.readouterr().out
    assert "\ntrust: allowed by --trust-remote-code" in out, out
    assert "trust_remote_code" not in out


def test_info_on_a_damaged_hub_gives_no_advice_to_allow_it(
        someone_elses_kernel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A changed file in the hub is refused whatever is allowed: info names that fix
    alone, not the trust options, which would not make the load work."""
    hub = LocalHub(someone_elses_kernel)
    commit = hub.branches("me/k")["v1"]
    init = hub.variant_path("me/k", commit, "torch-cpu") / "__init__.py"
    init.parent.chmod(0o755)
    init.chmod(0o644)
    init.write_text("VALUE = 2\n")
    for extra in (["--trust-remote-code"], ["--allow", "me/k"]):
        assert main(["info", "me/k", "--hub", str(hub.root), *extra]) == 1
        out = capsys.readouterr().out
        assert "\ntrust: refused, " in out and "changed: __init__.py" in out, out
        assert "publish the build again" in out
        assert "to load it" not in out and "kernelforge trust" not in out, out


# --- info on a LOCAL_KERNELS override --------------------------------------------------------


def test_info_on_a_local_override_says_where_and_that_trust_is_not_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_system: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kf_testutil import write_metadata

    vdir = tmp_path / "p" / "build" / "torch-cpu"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_kmsg_local_cpu_0000001")
    monkeypatch.setenv("LOCAL_KERNELS", f"Me/K={tmp_path / 'p'}")  # ids ignore case
    assert main(["info", "me/k"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"hub:        LOCAL_KERNELS ({tmp_path / 'p'})" in lines, out
    assert "revision:   - (a local build: its directory's files as they are now)" in lines
    assert lines[-1] == ("trust: not checked, a local build is loaded without the trust "
                         "policy (it applies to kernels from a hub; --trust-remote-code and "
                         "--allow are not needed)")
    assert "" not in lines and not any(line.rstrip() != line for line in lines), out
    # the loader agrees: it loads the build with nothing trusted or allowed
    from kernelforge import get_kernel

    assert get_kernel("me/k").VALUE == 1


def test_an_error_of_the_system_is_said_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelforge.build as build_module

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", str(tmp_path / "build"))

    monkeypatch.setattr(build_module, "build_project", full_disk)
    assert main(["build", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: [Errno 28] No space left on device: '{tmp_path / 'build'}'\n"


# --- walkthrough 2: --allow with a pattern, --sign with a key that is not there -------------


@pytest.mark.parametrize("command", [["info", "me/k"], ["lock", "."]])
def test_allow_with_a_pattern_says_where_patterns_go(
        command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """As trust_remote_code=["org/*"] does in Python: the option takes ids, and the
    trust store takes patterns."""
    with pytest.raises(SystemExit) as info:
        main([*command, "--allow", "my-org/*"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert ("argument --allow: 'my-org/*' is a pattern, but --allow takes repository ids "
            "('org/name'), each allowed as written; to allow every repository the pattern "
            "matches, add it to your trust store with: kernelforge trust allow 'my-org/*'\n"
            ) in err, err
    with pytest.raises(SystemExit):
        main([*command, "--allow", "*"])
    err = capsys.readouterr().err
    assert ("'*' is a pattern, but --allow takes repository ids ('org/name'), each allowed "
            "as written; to allow every repository for this command, pass "
            "--trust-remote-code instead;") in err, err
    with pytest.raises(SystemExit):
        main([*command, "--allow", "my org/*"])  # no pattern either: the id's message
    assert "is not a valid repository id" in capsys.readouterr().err


def test_sign_with_a_missing_key_names_the_keys_there(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.trust import config_dir

    _fake_build(project, _current_sources(project))
    argv = ["publish", str(project), "--repo", "me/k", "--hub", str(tmp_path / "h")]
    keys = config_dir() / "keys"
    assert main([*argv, "--sign", "nosuch"]) == 1
    assert capsys.readouterr().err == (
        f"error: --sign nosuch: no file nosuch here and no {keys / 'nosuch.pem'}; there are "
        f"no keys in {keys} (create a key with 'kernelforge keygen --name nosuch')\n")
    for name in ("default", "ci"):
        assert main(["keygen", "--name", name]) == 0
    capsys.readouterr()
    assert main([*argv, "--sign", "nosuch"]) == 1
    assert capsys.readouterr().err == (
        f"error: --sign nosuch: no file nosuch here and no {keys / 'nosuch.pem'}; the keys "
        f"in {keys} are: ci, default; pass one of those names, or a key file's path "
        "(create a key with 'kernelforge keygen --name nosuch')\n")
    monkeypatch.chdir(tmp_path)  # no default.pem here: the one in keys/ signs, and says so
    assert main([*argv, "--sign", "default.pem"]) == 0
    captured = capsys.readouterr()
    assert (f"note: there is no file default.pem here; signing with the key "
            f"{keys / 'default.pem'}\n") in captured.err
    assert "  signed with key " in captured.out
    assert main([*argv, "--sign", "other.pem"]) == 1
    assert capsys.readouterr().err.startswith(
        f"error: --sign other.pem: no file other.pem here and no {keys / 'other.pem'}; "
        f"the keys in {keys} are: ci, default;")


def test_sign_with_a_name_that_is_a_directory_here_uses_the_key_of_that_name(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A folder called like the key (a project, say) is no key file: --sign NAME still
    signs with keys/NAME.pem, and where that is missing the error names it."""
    from kernelforge.trust import config_dir

    _fake_build(project, _current_sources(project))
    argv = ["publish", str(project), "--repo", "me/k", "--hub", str(tmp_path / "h")]
    assert main(["keygen", "--name", "alice"]) == 0
    key_id = capsys.readouterr().out.split("key id:")[1].split()[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice.pem").mkdir()
    assert main([*argv, "--sign", "alice"]) == 0
    captured = capsys.readouterr()
    assert f"  signed with key {key_id}" in captured.out and captured.err == ""
    keys = config_dir() / "keys"
    assert main([*argv, "--sign", "alice.pem"]) == 0  # a file name: the note says which
    assert (f"note: alice.pem here is a directory; signing with the key "
            f"{keys / 'alice.pem'}\n") in capsys.readouterr().err
    (keys / "alice.pem").rename(keys / "bob.pem")
    for spec in ("alice", "alice.pem"):
        assert main([*argv, "--sign", spec]) == 1
        assert capsys.readouterr().err == (
            f"error: --sign {spec}: {spec} here is a directory, not a key file, and there is "
            f"no {keys / 'alice.pem'}; the keys in {keys} are: bob; pass one of those names, "
            "or a key file's path (create a key with 'kernelforge keygen --name alice')\n")


def test_versions_shows_tags_and_a_redirect(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """What revision= takes (a tag) and where a load goes (a redirect) are in the list."""
    from kf_sharing import make_variant, uid

    hub = LocalHub(tmp_path / "hub")
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("vt"))
    hub.publish("org/old", tmp_path / "p", version=1)
    commit = hub.tag("org/old", "stable", "v1")
    hub.set_status("org/old", 'kind = "redirect"\ndestination = "org/new"\n')
    capsys.readouterr()
    assert main(["versions", "org/old", "--hub", str(hub.root)]) == 0
    out = capsys.readouterr().out
    assert "  redirects to org/new: loads of org/old take that repository" in out, out
    assert f"  tags:\n    stable  {commit[:12]}\n" in out, out


def test_versions_lists_a_repository_whose_status_it_cannot_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kernel-status.toml of a kind this version does not know (a newer writer's) is a
    note, and the versions are still listed."""
    from kf_sharing import make_variant, uid

    from kernelforge.hub import _local_write

    hub = LocalHub(tmp_path / "hub")
    make_variant(tmp_path / "p", "torch-cpu", module_id=uid("vs"))
    hub.publish("org/k", tmp_path / "p", version=1)
    with _local_write.locked(hub, "org/k") as (repo_id, repo):  # past set_status's check
        _local_write.commit_main(hub, repo_id, repo, "status",
                                 {"kernel-status.toml": 'kind = "new"\n'})
    capsys.readouterr()
    assert main(["versions", "org/k", "--hub", str(hub.root)]) == 0
    out = capsys.readouterr().out
    assert "  note: org/k: kernel-status.toml: key 'kind' is 'new'" in out, out
    assert "\n  v1\n" in out and "torch-cpu" in out, out


def test_a_library_warning_reads_as_the_commands_own_lines(tmp_path: Path) -> None:
    """A warning the library logs while a command runs is printed `warning: ...`, like
    the command's own lines, once; a program that set up logging itself keeps its own
    (one copy of each warning, in its format)."""
    import subprocess

    from kernelforge import cache

    stray = tmp_path / "cache" / "variants" / "bad..org" / "x" / ("0" * 40) / "torch-cpu"
    stray.mkdir(parents=True)
    (stray / "entry.json").write_text("{}")
    (tmp_path / "cache" / cache._TAG).write_text(cache._TAG_TEXT)  # a cache kernelforge made
    argv = ["cache", "list", "--cache", str(tmp_path / "cache")]
    said = f"ignoring {stray}: not a download cache entry"
    proc = subprocess.run([sys.executable, "-m", "kernelforge", *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == f"warning: {said}\n", proc.stderr
    embedded = ("import logging, sys\nlogging.basicConfig(format='%(levelname)s %(message)s')\n"
                "from kernelforge.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", embedded, *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == f"WARNING kernelforge: {said}\n", proc.stderr


@pytest.mark.parametrize(("argv", "usage", "said"), [
    (["biuld"], "usage: kernelforge [-h]",
     "invalid choice: 'biuld' (choose from "),
    (["build", ".", "--backed", "cpu"], "usage: kernelforge build [-h]",
     "kernelforge build: error: unrecognized arguments: --backed cpu; did you mean --backend?"),
    (["cache", "lst"], "usage: kernelforge cache [-h]",
     "invalid choice: 'lst' (choose from "),
    (["cache", "list", "--jsno"], "usage: kernelforge cache list [-h]",
     "kernelforge cache list: error: unrecognized arguments: --jsno; did you mean --json?"),
    (["check", "a", "b"], "usage: kernelforge check [-h]",
     "kernelforge check: error: unrecognized arguments: b\n"),
    (["--verion", "build"], "usage: kernelforge [-h]",
     "kernelforge: error: unrecognized arguments: --verion; did you mean --version?"),
])
@pytest.mark.parametrize("from_sys_argv", [False, True], ids=["main(argv)", "sys.argv"])
def test_a_misspelt_command_or_option_gets_its_commands_usage_and_a_suggestion(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str],
    usage: str, said: str, from_sys_argv: bool
) -> None:
    """Also as the ``kernelforge`` command calls ``main``: with the words in sys.argv."""
    monkeypatch.setattr(sys, "argv", ["kernelforge", *argv] if from_sys_argv
                        else ["kernelforge"])
    with pytest.raises(SystemExit) as exit_info:
        main(None if from_sys_argv else argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert said in err, err
    if "invalid choice" in said:
        meant = {"biuld": "build", "lst": "list"}[argv[-1]]
        assert err.rstrip().endswith(f"; did you mean '{meant}'?"), err


@pytest.mark.parametrize(("argv", "listed", "said"), [
    ([], ["init", "build", "publish", "versions"],
     "kernelforge: error: no command given: choose one of the commands above, e.g. "
     "'kernelforge init my-relu' ('kernelforge COMMAND --help' shows what one takes)\n"),
    (["cache"], ["list", "remove", "clear"],
     "kernelforge cache: error: no action given: choose one of the actions above, e.g. "
     "'kernelforge cache list' ('kernelforge cache ACTION --help' shows what one takes)\n"),
    (["trust"], ["add", "allow", "list"], "e.g. 'kernelforge trust list'"),
])
def test_a_missing_command_lists_the_commands_with_what_each_does(
    capsys: pytest.CaptureFixture[str], argv: list[str], listed: list[str], said: str
) -> None:
    """`kernelforge` alone: the usage line names no command, so the help that lists them
    (with a line each) comes first, then one error line with a command to start with."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for command in listed:
        assert re.search(rf"^    {command} +\S", captured.err, re.M), captured.err
    assert captured.err.endswith(said) if said.endswith("\n") else said in captured.err
    assert captured.err.count("usage: ") == 1, captured.err
    assert "the following arguments are required" not in captured.err


def test_the_demo_says_that_it_does_not_follow_kernelforge_hub_hf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo publishes to a local hub only; KERNELFORGE_HUB=hf is not silently
    dropped (the publish line then names a path the user did not ask for)."""
    from kernelforge import build, demo

    class Published(Exception):
        pass

    def publish(*args: object, **kwargs: object) -> None:
        raise Published

    monkeypatch.setenv("KERNELFORGE_HUB", "hf")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "build_project", lambda *args, **kwargs: [])
    monkeypatch.setattr(LocalHub, "publish", publish)
    lines: list[str] = []
    with pytest.raises(Published):
        demo.run_demo(workspace=tmp_path / "relu", say=lines.append)
    assert any("note: KERNELFORGE_HUB=hf is not followed: the demo publishes only to a "
               "local hub" in line for line in lines), lines
    monkeypatch.delenv("KERNELFORGE_HUB")
    lines.clear()
    with pytest.raises(Published):
        demo.run_demo(workspace=tmp_path / "relu", say=lines.append)
    assert not any("note:" in line for line in lines), lines


def test_cache_list_says_what_a_directory_that_is_no_cache_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --cache is not listed as an empty cache: a missing directory is said
    to be missing, and one holding other things is refused as clear refuses it."""
    assert main(["cache", "list", "--cache", str(tmp_path / "nothing")]) == 0
    assert capsys.readouterr().out == (f"the download cache {tmp_path / 'nothing'} is empty: "
                                       "the directory does not exist (nothing was downloaded "
                                       "there yet)\n")
    (tmp_path / "project" / "src").mkdir(parents=True)
    assert main(["cache", "list", "--cache", str(tmp_path / "project")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'project'} does not look like a kernelforge "
                          f"download cache: it holds {tmp_path / 'project' / 'src'}"), err
    assert "refusing to list it" in err



def test_versions_of_a_repository_not_in_the_local_hub_points_at_the_other_hub(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`versions` looks in the local hub unless told: a miss says how to look on the
    Hugging Face Hub, and names KERNELFORGE_HUB when that variable chose the hub."""
    monkeypatch.setenv("KERNELFORGE_HUB", str(tmp_path / "nohub"))
    assert main(["versions", "org/missing"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: KERNELFORGE_HUB={tmp_path / 'nohub'} chose the local hub"), err
    assert err.rstrip().endswith("(to look on the Hugging Face Hub: --hub hf)"), err
    assert main(["versions", "org/missing", "--hub", str(tmp_path / "nohub")]) == 1
    err = capsys.readouterr().err
    assert "KERNELFORGE_HUB" not in err and "--hub hf" not in err, err


@pytest.mark.parametrize(("given", "said"), [
    ("v1", "'v1' is not a version; expected a non-negative integer, e.g. 1 (the branch v1 "
           "holds version 1)"),
    ("latest", "'latest' is not a version; expected a non-negative integer, e.g. 1\n"),
])
def test_a_version_given_as_its_branch_name_is_explained(
    capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    with pytest.raises(SystemExit):
        main(["info", "org/name", "--version", given])
    assert said in capsys.readouterr().err



# --- suggested commands quote the paths they name ------------------------------------------

SPACED = "sp ace é"  # a space and a character the shell needs quoted


def _command_after(text: str, lead: str, end: str = "\n") -> list[str]:
    """The command a message suggests after ``lead`` (up to ``end``), split as a shell
    would split it when pasted."""
    import shlex

    assert lead in text, text
    return shlex.split(text.split(lead, 1)[1].split(end, 1)[0])


def test_init_publish_and_keygen_suggest_commands_that_paste_into_a_shell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / SPACED / "proj"
    assert main(["init", "ab", str(dest)]) == 0
    assert _command_after(capsys.readouterr().out, "next: ") == [
        "kernelforge", "build", str(dest), "&&", "kernelforge", "publish", str(dest),
        "--repo", "<org>/ab"]
    monkeypatch.chdir(tmp_path)
    assert main(["publish", f"{SPACED}/proj", "--repo", "a/b",
                 "--hub", str(tmp_path / "hub")]) == 1
    assert _command_after(capsys.readouterr().err, "build it first (", ")") == [
        "kernelforge", "build", f"{SPACED}/proj"]
    out = tmp_path / SPACED / "k é.pem"
    assert main(["keygen", "--out", str(out), "--no-trust"]) == 0
    assert _command_after(capsys.readouterr().out, "publish with: ") == [
        "kernelforge", "publish", "PROJECT", "--repo", "ORG/NAME", "--sign", str(out)]


def test_fixes_that_name_a_path_quote_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The rebuild hint of a refused publish, chmod for a key others can read, and the
    --python and --card guesses each name a path the shell must get as one word."""
    from kernelforge import signing
    from kernelforge.build.interpreter import python_env
    from kernelforge.cli import _read_card
    from kernelforge.errors import KernelforgeError

    project = tmp_path / SPACED / "k"
    assert main(["init", "k-one", str(project)]) == 0
    vdir = _fake_build(project, _current_sources(project))
    (vdir / "__init__.py").write_text("VALUE = 2\n")  # no longer what metadata.json records
    assert main(["publish", str(project), "--repo", "me/k", "--hub", str(tmp_path / "h")]) == 1
    assert _command_after(capsys.readouterr().err, "rebuild it (", ")") == [
        "kernelforge", "build", str(project)]

    key = tmp_path / SPACED / "k.pem"
    signing.generate_key(key)
    key.chmod(0o644)
    with pytest.raises(KernelforgeError) as info:
        signing.load_signing_key(key)
    assert _command_after(str(info.value), "fix: ") == ["chmod", "600", str(key)]

    python = tmp_path / SPACED / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    with pytest.raises(KernelforgeError) as info:
        python_env(python.parent.parent)
    assert _command_after(str(info.value), "did you mean ", "?") == ["--python", str(python)]

    from kernelforge.cache import DownloadCache

    cache = tmp_path / SPACED / "cache"
    fix = DownloadCache(cache).damaged_entry_fix("me/k", "0123456789abcdef")
    assert _command_after(fix, "'", "', then") == [
        "kernelforge", "cache", "remove", "me/k", "--revision", "0123456789ab",
        "--cache", str(cache)]

    monkeypatch.chdir(tmp_path)  # no build.toml here, but in the project
    with pytest.raises(KernelforgeError) as info:
        _read_card("build.toml", project)
    assert _command_after(str(info.value), "did you mean ", "?") == [
        "--card", str(project / "build.toml")]


# --- no home directory ------------------------------------------------------------------------


def _no_home_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOME, XDG or kernelforge location variable: the default places are asked for."""
    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "KERNELFORGE_HUB",
                 "KERNELFORGE_CACHE", "KERNELFORGE_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def _no_home_error(holds: str, variable: str, xdg: str, *, in_database: bool) -> str:
    """The error line of a command that needs the default place of ``holds`` with HOME
    unset (and, unless ``in_database``, no home directory in the user database)."""
    import os

    missing = ("" if in_database else
               f" and user id {os.getuid()} has no home directory in the user database")
    return (f"error: cannot tell which folder holds {holds}: the home directory is unknown "
            f"(HOME is not set{missing}); fix: set {variable} to a directory, or set HOME "
            f"(or {xdg}) to an absolute path\n")


@pytest.mark.parametrize("argv, holds, variable, xdg", [
    (["versions", "me/k"], "the local hub", "KERNELFORGE_HUB", "XDG_CACHE_HOME"),
    (["cache", "list"], "the download cache", "KERNELFORGE_CACHE", "XDG_CACHE_HOME"),
    (["trust", "list"], "the trust store and your keys", "KERNELFORGE_CONFIG",
     "XDG_CONFIG_HOME"),
])
def test_no_home_directory_is_an_error_naming_the_variable_to_set(
        argv: list[str], holds: str, variable: str, xdg: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A container run under a user id the user database does not know, with HOME unset:
    one error line with the fix, not platformdirs' RuntimeError and its traceback (nor,
    with older platformdirs, a hub in a folder named '~' of the current directory)."""
    import pwd

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    _no_home_variables(monkeypatch)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    assert capsys.readouterr().err == _no_home_error(holds, variable, xdg, in_database=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, finder, holds, variable, xdg", [
    (["versions", "me/k"], "user_cache_dir", "the local hub", "KERNELFORGE_HUB",
     "XDG_CACHE_HOME"),
    (["trust", "list"], "user_config_dir", "the trust store and your keys",
     "KERNELFORGE_CONFIG", "XDG_CONFIG_HOME"),
])
def test_a_tilde_path_from_older_platformdirs_is_no_home_directory(
        argv: list[str], finder: str, holds: str, variable: str, xdg: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Older platformdirs releases do not raise without a home directory: they return a
    path that starts with '~' (what expanduser leaves), which used as it is would put the
    hub or the trust store in a folder named '~' of the current directory."""
    import platformdirs

    _no_home_variables(monkeypatch)
    monkeypatch.setattr(platformdirs, finder, lambda *args, **kwargs: "~/.any/kernelforge")
    monkeypatch.chdir(tmp_path)
    # the user database is blamed only where it has no home directory for this user
    from kernelforge._userdirs import _in_user_database

    assert main(argv) == 1
    assert capsys.readouterr().err == _no_home_error(holds, variable, xdg,
                                                     in_database=_in_user_database())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("environ, said", [
    # older platformdirs give "rel/.cache" or "~/.cache" here rather than raising; the
    # user database, which HOME set takes precedence over, is not blamed
    ({"HOME": "rel"}, "HOME='rel' is not an absolute path"),
    ({"XDG_CACHE_HOME": "cache"}, "HOME is not set and XDG_CACHE_HOME='cache' is not an "
                                  "absolute path"),
])
def test_no_home_directory_names_only_what_is_wrong(
        environ: dict[str, str], said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    from kernelforge._userdirs import user_dir
    from kernelforge.errors import HubError

    for name in ("HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda app: f"rel/.cache/{app}")
    with pytest.raises(HubError) as info:
        user_dir("cache", "the local hub", "KERNELFORGE_HUB", HubError)
    assert str(info.value) == (
        f"cannot tell which folder holds the local hub: the home directory is unknown "
        f"({said}); fix: set KERNELFORGE_HUB to a directory, or set HOME (or "
        "XDG_CACHE_HOME) to an absolute path")


def test_no_home_directory_for_the_demo_names_the_variables_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's copy has no variable of its own: the fix names HOME and XDG_CACHE_HOME
    once each."""
    import platformdirs

    from kernelforge import demo
    from kernelforge.errors import KernelforgeError

    monkeypatch.setenv("HOME", "rel")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda app: f"rel/.cache/{app}")
    with pytest.raises(KernelforgeError) as info:
        demo._workspace()
    assert str(info.value).endswith(
        "(HOME='rel' is not an absolute path); fix: set HOME or XDG_CACHE_HOME to an "
        "absolute path")
