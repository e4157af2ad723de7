"""The `kernelforge` command: exit codes, messages, and the init -> build -> publish ->
versions -> get_kernel loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kf_testutil import EXAMPLE_RELU

from kernelforge._parse import toml_loads
from kernelforge.cli import main
from kernelforge.hub import LocalHub


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelforge", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "kernelforge 0.1.0" in capsys.readouterr().out
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in ("init", "check", "build", "publish", "versions", "demo"):
        assert command in proc.stdout


def test_check_accepts_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE_RELU)]) == 0
    out = capsys.readouterr().out
    assert "build.toml: ok" in out
    assert "relu_cpu (cpu)" in out and "(cuda)" in out


def test_check_reports_errors_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "build.toml").write_text('[general]\nname = "x"\nedition = 5\nversoin = 1\n')
    proc = run_cli("check", str(tmp_path))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "build.toml" in proc.stderr and "general.versoin" in proc.stderr
    assert "did you mean 'version'" in proc.stderr


def test_usage_error_exits_2() -> None:
    proc = run_cli("build", "--no-such-flag")
    assert proc.returncode == 2
    assert "unrecognized arguments" in proc.stderr


def init_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``kernelforge init`` says of a name it refuses: bad usage (exit 2)."""
    with pytest.raises(SystemExit) as info:
        main(["init", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "kernelforge init: error: argument name: invalid kernel name" in err, err
    return err


def test_init_rejects_bad_names_and_existing_dirs(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid kernel name 'Bad_Name'" in init_refused(["Bad_Name", str(tmp_path / "a")],
                                                            capsys)
    for meant in ("MyRelu", "my_relu", "My Relu"):
        err = init_refused([meant, str(tmp_path / "a")], capsys)
        assert "(did you mean 'my-relu'?)" in err
    err = init_refused(["x", str(tmp_path / "a")], capsys)  # nothing to make of it
    assert "(e.g. 'my-relu')" in err
    init_refused(["relu\n", str(tmp_path / "n")], capsys)  # a trailing newline too
    assert not (tmp_path / "n").exists()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "file").write_text("x")
    assert main(["init", "good", str(tmp_path / "b")]) == 1
    assert "not empty" in capsys.readouterr().err


def test_init_scaffolds_a_valid_project(tmp_path: Path) -> None:
    dest = tmp_path / "my-act"
    assert main(["init", "my-act", str(dest)]) == 0
    assert (dest / "torch-ext" / "my_act" / "__init__.py").is_file()
    assert (dest / "my_act_cpu" / "my_act_cpu.cpp").is_file()
    assert (dest / "my_act_cuda" / "my_act_cuda.cu").is_file()
    binding = (dest / "torch-ext" / "torch_binding.cpp").read_text()
    assert '#include "registration.h"' in binding
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME" in binding
    assert "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)" in binding
    assert not (dest / "registration.h").exists()
    assert main(["check", str(dest)]) == 0
    from kernelforge.manifest import load_manifest

    m = load_manifest(dest)
    assert m.name == "my-act" and m.python_name == "my_act"
    assert set(m.backends) == {"cpu", "cuda"}


def test_publish_without_builds_explains_the_fix(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    assert main(["init", "relu", str(project)]) == 0
    proc = run_cli("publish", str(project), "--repo", "me/relu", "--hub", str(tmp_path / "hub"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"{project} is a kernel project without a build/ directory" in proc.stderr
    assert f"build it first (kernelforge build {project})" in proc.stderr
    assert "build_dir" not in proc.stderr  # the Python parameter's name is not the CLI's


@pytest.mark.slow
def test_scaffolded_project_builds_publishes_and_loads(tmp_path: Path) -> None:
    """The README's quickstart: kernelforge init -> build -> publish -> versions, then its
    Step 5 code in a fresh process (pinned to the cpu build, so it holds on a GPU machine)."""
    from test_readme import quickstart

    init_args, repo, code, _ = quickstart()
    name = init_args[1]
    project = tmp_path / name
    hub = tmp_path / "hub"
    assert run_cli("init", name, str(project)).returncode == 0
    proc = run_cli("build", str(project), "--backend", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # progress names every source once it has compiled
    assert "] compiled my_relu_cpu/my_relu_cpu.cpp" in proc.stdout
    assert "] compiled torch-ext/torch_binding.cpp" in proc.stdout
    proc = run_cli("publish", str(project), "--repo", repo, "--hub", str(hub))
    assert proc.returncode == 0, proc.stderr
    assert "branch v1" in proc.stdout
    proc = run_cli("versions", repo, "--hub", str(hub))
    assert proc.returncode == 0, proc.stderr
    assert "v1" in proc.stdout and "-cpu-" in proc.stdout
    load = f"get_kernel({repo!r})".replace("'", '"')
    assert load in code
    script = code.replace(load, load[:-1] + ', backend="cpu")') + (
        "import json\n"
        "k = next(v for v in list(globals().values()) if getattr(v, '__name__', '')"
        ".startswith('_my_relu_cpu_'))\n"
        "y = torch.randn(1000)\n"
        "print(json.dumps({'name': k.__name__, 'ok': bool(torch.equal(k.my_relu(y), "
        "torch.relu(y)))}))\n"
    )
    env = dict(os.environ, KERNELFORGE_HUB=str(hub))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "tensor(" in proc.stdout  # the README's print
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True


# --- bad arguments: usage errors (exit 2), never a traceback ------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["versions", "bad"], "argument repo: repo_id: 'bad' is not a valid repository id"),
    (["publish", ".", "--repo", "bad"], "argument --repo: repo_id: 'bad' is not a valid"),
    (["trust", "allow", "badpattern"],
     "argument pattern: 'badpattern' is not a repository pattern; expected 'org/name', "
     "'org/*' or '*'"),
    (["trust", "add", f"ed25519:{'A' * 43}=", "--repo", "bad"], "argument --repo: 'bad' is not a "
     "repository pattern"),
    (["trust", "add-sigstore", "https://x", "--repo", "a/b/c"], "'a/b/c' is not a repository"),
    (["keygen", "--no-trust", "--repo", "org"], "argument --repo: 'org' is not a repository"),
    (["init", "Bad_Name"], "argument name: invalid kernel name 'Bad_Name'"),
    (["init", "class", "d"], "argument name: invalid kernel name 'class'"),
    (["trust", "add", "ed25519:AAAA"], "argument key: public key: 'ed25519:AAAA' is not an "
     "ed25519 public key"),
    (["trust", "add-sigstore", "ci-bot"], "identity 'ci-bot': expected a sigstore certificate "
     "identity"),
    (["trust", "add-sigstore", ""], "identity '' / issuer "),
    (["trust", "add-sigstore", "https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main",
      "--issuer", "http://issuer.example"], "expected a non-empty identity and an https:// "
     "issuer URL"),
    (["info", "me/k1", "--revision="], "argument --revision: '' is not a revision; expected "
     "a branch, tag or commit"),
    (["info", "me/k1", "--version=-1"], "argument --version: '-1' is not a version; expected "
     "a non-negative integer"),
    (["build", ".", "--arch", "sm_90"], "argument --arch: 'sm_90' is not a CUDA capability "
     "(write it as '9.0')"),
    (["build", ".", "--arch", "bogus"], "or a ROCm arch such as 'gfx942'"),
    (["build", ".", "--arch", "gfx94"], "unknown ROCm arch 'gfx94' (did you mean 'gfx942'?)"),
    (["build", ".", "--arch", "9.0", "--arch", "gfx942"],
     "--arch mixes CUDA capabilities (9.0) and ROCm archs (gfx942)"),
    (["build", ".", "--backend", "cuda", "--arch", "gfx942"],
     "--backend cuda takes CUDA capabilities"),
    (["build", ".", "--backend", "rocm", "--arch", "9.0a"], "--backend rocm takes ROCm archs"),
    (["build", ".", "-j", "0"], "argument -j/--jobs: '0' is not a number of jobs"),
    (["demo", "--hub", "hf"], "argument --hub: the demo publishes to a local hub only"),
    (["demo", "--hub", "HuggingFace"], "argument --hub: the demo publishes to a local hub only"),
    # empty paths: tests/test_empty_paths.py
])
def test_bad_arguments_are_usage_errors(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error: " in err and message in err, err


def test_an_empty_hub_is_refused_in_one_text(capsys: pytest.CaptureFixture[str]) -> None:
    """``--hub ""`` and ``hub=""`` are one refusal: the CLI says the library's text, in
    its own words for the default (leave --hub out, not None)."""
    from kernelforge.hub import as_hub
    from kernelforge.hub.local import EMPTY_HUB

    with pytest.raises(ValueError) as library:
        as_hub("")
    assert str(library.value) == EMPTY_HUB
    with pytest.raises(SystemExit):
        main(["versions", "me/k1", "--hub", ""])
    err = capsys.readouterr().err
    said = EMPTY_HUB.removeprefix("hub: ").split(", or ")[0]  # up to the default
    assert f"argument --hub: '': {said}, or leave --hub out for the default hub" in err, err


def test_bad_arguments_print_no_traceback() -> None:
    for argv in (["versions", "bad"], ["trust", "allow", "badpattern"],
                 ["info", "me/k1", "--revision="], ["build", ".", "--arch", "sm_90"]):
        proc = run_cli(*argv)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "error: argument" in proc.stderr


def _build_arguments(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The keyword arguments ``kernelforge build`` passes to ``build_project``, which is
    replaced by one that only records them (and builds nothing)."""
    import kernelforge.build

    seen: dict[str, object] = {}

    def fake_build(path: str, **kw: object) -> list[object]:
        seen.update(kw)
        return []

    monkeypatch.setattr(kernelforge.build, "build_project", fake_build)
    return seen


def test_arch_values_reach_the_build_canonically(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    seen = _build_arguments(monkeypatch)
    assert main(["build", str(tmp_path), "--arch", " 9.0a", "--arch", "12.1+PTX",
                 "--backend", "cuda", "-j", "3"]) == 0
    assert seen["archs"] == ["9.0a", "12.1+PTX"] and seen["jobs"] == 3


def test_publish_checks_the_manifests_repo_id(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "k"
    assert main(["init", "k-one", str(project)]) == 0
    with (project / "build.toml").open("a") as fh:
        fh.write('\n[general.hub]\nrepo-id = "me/bad-"\n')
    capsys.readouterr()
    assert main(["publish", str(project), "--hub", str(tmp_path / "hub")]) == 1
    err = capsys.readouterr().err
    assert "key 'general.hub.repo-id': 'me/bad-' is not a hub repository id" in err
    assert "e.g. 'kernels-community/relu'" in err
    # refused by check and build too, so a project that builds is not stopped at publish
    assert main(["check", str(project)]) == 1
    assert "key 'general.hub.repo-id': 'me/bad-' is not a hub repository id" in \
        capsys.readouterr().err


# --- publish: hubs, stale and tampered builds, the card ---------------------------------------


def _fake_build(project: Path, source: str | None) -> Path:
    """``project/build/torch-cpu``: a tiny variant recording ``source`` as the hash of the
    sources it was built from (as kernelforge builds do)."""
    from kf_testutil import write_metadata

    vdir = project / "build" / "torch-cpu"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_k_one_cpu_0000001")
    if source is not None:
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["provenance"] = {"source-sha256": source}
        (vdir / "metadata.json").write_text(json.dumps(meta))
    return vdir


def _current_sources(project: Path) -> str:
    from kernelforge.build import source_identity
    from kernelforge.manifest import load_manifest

    return source_identity(project, load_manifest(project)).content_hash


def test_publish_warns_about_a_build_of_other_sources(unbuilt: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A build older than the sources is published (that may be on purpose), with a
    warning naming the variant and the fix."""
    current = _current_sources(unbuilt)
    _fake_build(unbuilt, current)
    argv = ["publish", str(unbuilt), "--repo", "me/k", "--hub", str(tmp_path / "hub")]
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err
    with (unbuilt / "k_one_cpu" / "k_one_cpu.cpp").open("a") as fh:
        fh.write("// changed after the build\n")
    now = _current_sources(unbuilt)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert (f"warning: the files of {unbuilt} differ from those torch-cpu was built from "
            f"(hash {current[:7]} at the build, {now[:7]} now; the hash, like the variant's "
            "uid, covers every file of the project, a README.md too): the hub already holds "
            f"torch-cpu as it was built; to publish the current files, run 'kernelforge build "
            f"{unbuilt}' (the variant gets a new uid), then publish again") in captured.err
    # the same build again: the branch already holds it, and no revision is made
    assert "unchanged: me/k version 1 (branch v1) already holds this build" in captured.out
    assert len(LocalHub(tmp_path / "hub").log("me/k", "v1")) == 1


def test_publish_after_editing_only_the_card_does_not_call_the_build_stale(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The documented ``--card README.md`` flow: a README written after the build changes
    the project's hash (by design, the uid covers every file), so the publish still
    notes it, but in words that fit a card edit: no "old build", no "current sources"."""
    _fake_build(unbuilt, _current_sources(unbuilt))
    (unbuilt / "README.md").write_text("# k-one\n\nA kernel.\n")
    assert main(["publish", str(unbuilt), "--repo", "me/k", "--hub", str(tmp_path / "hub"),
                 "--card", str(unbuilt / "README.md")]) == 0
    err = capsys.readouterr().err
    assert f"the files of {unbuilt} differ from those torch-cpu was built from" in err
    assert "covers every file of the project, a README.md too" in err
    assert "published torch-cpu as it was built" in err
    for stale in ("old build", "current sources", "built from other sources"):
        assert stale not in err, err


def test_publish_without_a_recorded_source_hash_does_not_warn(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_build(unbuilt, None)  # e.g. a Hugging Face kernel-builder build
    assert main(["publish", str(unbuilt), "--repo", "me/k", "--hub", str(tmp_path / "h")]) == 0
    assert capsys.readouterr().err == ""


def test_publish_refuses_a_changed_build_in_publish_words(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vdir = _fake_build(unbuilt, _current_sources(unbuilt))
    (vdir / "__init__.py").write_text("VALUE = 2\n")
    assert main(["publish", str(unbuilt), "--repo", "me/k", "--hub", str(tmp_path / "h")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: refusing to publish {vdir}: its files do not match the "
                          "digests its metadata.json records")
    assert "changed: __init__.py" in err and "refusing to load" not in err
    assert f"rebuild it (kernelforge build {unbuilt}), then publish again" in err


def test_publish_to_a_file_or_a_missing_hub_names_it(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_build(unbuilt, None)
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["publish", str(unbuilt), "--repo", "me/k", "--hub", str(afile)]) == 1
    assert f"error: cannot write to the hub: {afile} is not a directory" in (
        capsys.readouterr().err)
    assert main(["versions", "me/k", "--hub", str(afile)]) == 1
    assert f"{afile} is not a directory" in capsys.readouterr().err
    assert main(["versions", "me/k", "--hub", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert f"the hub directory {tmp_path / 'nowhere'} does not exist" in err
    assert "it is empty" not in err


def test_publish_card(unbuilt: Path, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.hub import LocalHub

    _fake_build(unbuilt, None)
    hub = LocalHub(tmp_path / "hub")
    argv = ["publish", str(unbuilt), "--repo", "me/k", "--hub", str(hub.root)]
    assert main([*argv, "--card", str(tmp_path / "missing.md")]) == 1
    assert f"--card {tmp_path / 'missing.md'}: cannot read the card {tmp_path / 'missing.md'} " \
        "(No such file" in capsys.readouterr().err
    assert not hub.has_repo("me/k")
    # a relative path is the current directory's; the project's file is pointed at
    (unbuilt / "CARD.md").write_text("# k\n")
    assert main([*argv, "--card", "CARD.md"]) == 1
    err = capsys.readouterr().err
    assert f"fix: did you mean --card {unbuilt / 'CARD.md'}? (the path is taken from the " \
        "current directory)" in err, err
    assert not hub.has_repo("me/k")
    from kernelforge.hub import base

    (tmp_path / "card.md").write_text("# k-one\n\nA kernel.\n")
    with pytest.MonkeyPatch.context() as patch:  # a card the hub could not read back
        patch.setattr(base, "SMALL_FILE_MAX", 18)
        assert main([*argv, "--card", str(tmp_path / "card.md")]) == 1
    assert capsys.readouterr().err == (
        f"error: --card {tmp_path / 'card.md'}: 19 bytes, more than the 18 a hub reads of "
        "one file; fix: shorten it (link large images rather than embedding them)\n")
    assert not hub.has_repo("me/k")
    assert main([*argv, "--card", str(tmp_path / "card.md")]) == 0
    assert f"card: {tmp_path / 'card.md'} (README.md on branch v1 and on branch main)" \
        in capsys.readouterr().out
    for branch in ("v1", "main"):
        commit = hub.branches("me/k")[branch]
        assert hub.read_file("me/k", commit, "README.md") == b"# k-one\n\nA kernel.\n"
    main_commit = hub.branches("me/k")["main"]
    assert hub.read_file("me/k", main_commit, "README.md") == b"# k-one\n\nA kernel.\n"


def test_publish_warns_of_a_card_that_still_holds_inits_placeholder(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The card 'kernelforge init' writes names the repository as '<org>/NAME' until the
    user fills it in: published so, its usage example loads nothing, which the publish
    says (after publishing, as for an edited project: the card is published as given)."""
    _fake_build(unbuilt, None)
    argv = ["publish", str(unbuilt), "--repo", "me/k", "--hub", str(tmp_path / "hub")]
    card = tmp_path / "README.md"
    card.write_text('# k\n\n```python\nk = get_kernel("<org>/k", version=1)\n```\n')
    assert main([*argv, "--card", str(card)]) == 0
    captured = capsys.readouterr()
    assert f"card: {card} (README.md on branch v1 and on branch main)" in captured.out
    assert captured.err == (
        f"warning: the card {card} still says '<org>/k', the placeholder 'kernelforge init' "
        "writes: its usage example names no repository a reader could load; replace <org> "
        "with me in it, then publish again with --card\n")
    card.write_text(card.read_text().replace("<org>", "me"))
    assert main([*argv, "--card", str(card)]) == 0
    assert capsys.readouterr().err == ""
    # the comment init's card opens with names the placeholder too, but no reader sees it
    card.write_text("<!-- publish with: kernelforge publish . --repo <org>/k --card\n"
                    "README.md -->\n" + card.read_text())
    assert main([*argv, "--card", str(card)]) == 0
    assert capsys.readouterr().err == ""


def test_publish_leaves_the_card_hugging_faces_builder_renders_in_build(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hugging Face's kernel-builder build renders the project's CARD.md template to
    build/CARD.md beside the variants (its upload publishes it as the README): such a
    build publishes, the card left out with a note, or as the card with --card."""
    _fake_build(unbuilt, None)
    (unbuilt / "build" / "CARD.md").write_text("# k-one\n\nRendered.\n")
    hub = LocalHub(tmp_path / "hub")
    argv = ["publish", str(unbuilt), "--repo", "me/k", "--hub", str(hub.root)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "variants: torch-cpu" in captured.out
    assert (f"note: {unbuilt / 'build' / 'CARD.md'} (the card Hugging Face's kernel-builder "
            "renders) is not a variant and is not published; to publish it as the "
            f"repository card, add --card {unbuilt / 'build' / 'CARD.md'}") in captured.err
    commit = hub.branches("me/k")["v1"]
    assert hub.variants("me/k", commit) == ["torch-cpu"]
    assert "main" not in hub.branches("me/k")
    assert main([*argv, "--card", str(unbuilt / "build" / "CARD.md")]) == 0
    assert "note:" not in capsys.readouterr().err
    card = hub.read_file("me/k", hub.branches("me/k")["main"], "README.md")
    assert card == b"# k-one\n\nRendered.\n"
    (unbuilt / "build" / "CARD.md").unlink()
    (unbuilt / "build" / "CARD.md").mkdir()  # only the file is the builder's card
    assert main(argv) == 1
    assert "'CARD.md' is not a build variant name" in capsys.readouterr().err


def test_publish_help_names_the_repo_default(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # no line breaks inside words
    with pytest.raises(SystemExit):
        main(["publish", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--repo REPO repository id, org/name (default: [general.hub] repo-id in build.toml)" \
        in out
    assert "--card FILE" in out


def test_versions_on_an_offline_hf_prints_nothing_before_failing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KERNELFORGE_CACHE", str(tmp_path / "cache"))
    assert main(["versions", "me/k", "--hub", "hf"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "error: " in captured.err


def test_lock_counts_variants_in_words(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    import kernelforge.lock

    def pinned(n: int) -> SimpleNamespace:
        return SimpleNamespace(repo_id=f"me/k{n}", branch="v1", commit=f"{n}" * 40, hub="local",
                               variants={f"torch{i}-cpu": {} for i in range(n)}, depends={})

    monkeypatch.setattr(kernelforge.lock, "lock_project", lambda *a, **k: SimpleNamespace(
        kernels=[pinned(1), pinned(2)], path=Path("kernelforge.lock"), hf_path=None))
    assert main(["lock"]) == 0
    out = capsys.readouterr().out
    assert f"me/k1: branch v1, commit {'1' * 12} (local), 1 variant\n" in out
    assert f"me/k2: branch v1, commit {'2' * 12} (local), 2 variants\n" in out


def test_a_closed_pipe_ends_quietly() -> None:
    """``kernelforge ... | head``: the reader goes away; no BrokenPipeError traceback, and
    the exit code says the output was cut off (128 + SIGPIPE)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelforge", "trust", "list"],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


# --- init: names and directories ------------------------------------------------------------


@pytest.mark.parametrize(("name", "reason"), [
    ("main", "C++ reserves it for a program's entry point"),
    ("ops", "use it for the op library"),
    ("class", "it is a Python keyword"),
    ("lambda", "it is a Python keyword"),
    ("int", "it is a C++ keyword"),
    ("new", "it is a C++ keyword"),
    ("auto", "it is a C++ keyword"),
    ("delete", "it is a C++ keyword"),
    ("and-eq", "it is a C++ keyword"),
    ("torch", "C++ namespace"),
    ("std", "C++ namespace"),
    ("at", "C++ namespace"),
    ("c10", "C++ namespace"),
    ("check-args", "the generated kernel sources use it"),
    ("isinstance", "the generated __init__.py calls the Python builtin"),
    *((n, "names ending in '_t' are reserved for types by C and POSIX") for n in
      ("size-t", "int64-t", "uint8-t", "ptrdiff-t", "ssize-t", "off-t", "max-align-t",
       "nullptr-t")),
    *((n, "it is a type of the CUDA headers") for n in
      ("half", "half2", "nv-bfloat16", "dim3", "float4", "uchar2", "longlong1")),
    *((n, "it is a type of the C library headers") for n in
      ("uint", "ushort", "ulong", "u-int", "u-char")),
    *((n, "it is a variable, type or macro of the C library headers") for n in
      ("timezone", "environ", "optarg", "signgam", "alloca", "fd-set", "va-list")),
    *((n, "it is a type of Python's C API (Python.h)") for n in
      ("getter", "setter", "digit", "destructor", "inquiry", "binaryfunc")),
    ("detail", "it is a namespace or name of PyTorch's or CUDA's headers"),
    ("double4-32a", "it is a type of the CUDA headers"),
])
def test_init_refuses_names_that_break_the_generated_code(
        name: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "p"
    err = init_refused([name, str(dest)], capsys)
    assert not dest.exists()
    python_name = name.replace("-", "_")
    assert f"invalid kernel name '{name}'" in err and f"named '{python_name}'" in err
    assert reason in err
    suggested = f"my-{name}" if not name.endswith("-t") else f"{name}-kernel"
    assert f"choose another name, e.g. '{suggested}'" in err
    assert not dest.exists()
    # the suggested name works
    assert main(["init", suggested, str(dest)]) == 0


@pytest.mark.slow
def test_init_names_after_c_library_functions_build_and_load(tmp_path: Path) -> None:
    """A kernel named after a function of the C library (exp, tanh, abs, ...) builds:
    the binding registers the op's own function, not the overload set of that name."""
    project = tmp_path / "exp"
    assert main(["init", "exp", str(project)]) == 0
    proc = run_cli("build", str(project), "--backend", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    script = ("import torch\n"
              "from kernelforge import get_local_kernel\n"
              f"k = get_local_kernel({str(project)!r})\n"
              "x = torch.randn(1000)\n"
              "print(bool(torch.equal(k.exp(x), torch.relu(x))))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "True"


def test_init_into_a_file_or_an_impossible_directory(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["init", "foo-bar", str(afile)]) == 1
    assert f"{afile} exists and is not a directory; choose another directory" in (
        capsys.readouterr().err)
    assert main(["init", "foo-bar", str(afile / "sub")]) == 1
    err = capsys.readouterr().err
    assert f"cannot create the project in {afile / 'sub'}" in err
    assert "choose a directory you can write to" in err
    assert afile.read_text() == "x"


def test_init_scaffolds_into_a_fresh_git_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Create the repository, clone it, scaffold into it: a directory holding only .git
    takes the project, and .git is left as it was."""
    repo = tmp_path / "gitd"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    head = (repo / ".git" / "HEAD").read_text()
    monkeypatch.chdir(repo)
    assert main(["init", "gg", "."]) == 0
    assert capsys.readouterr().out.startswith("created .\nnext: kernelforge build . && ")
    assert (repo / "build.toml").is_file() and (repo / ".gitignore").is_file()
    assert (repo / ".git" / "HEAD").read_text() == head
    assert main(["check", "."]) == 0
    worktree = tmp_path / "wt"  # a worktree or submodule: .git is a file
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: ../gitd/.git/worktrees/wt\n")
    assert main(["init", "gg", str(worktree)]) == 0
    assert (worktree / "build.toml").is_file()


@pytest.mark.parametrize(("entries", "said"), [
    (["README.md"], "it holds README.md; init writes only into a new or empty directory, "
                    "or one that holds only .git (a fresh 'git init' or clone); choose "
                    "another directory, or move it out of the way"),
    (["src", "LICENSE", "README.md"], "it holds LICENSE and 2 other entries;"),
    ([".gitignore", "b"], "it holds .gitignore and 1 other entry;"),
])
def test_init_names_what_keeps_it_from_a_directory(
        entries: list[str], said: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "d"
    (dest / ".git").mkdir(parents=True)
    for name in entries:
        (dest / name).write_text("mine\n")
    assert main(["init", "gg", str(dest)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {dest} exists and is not empty: {said}"), err
    assert sorted(p.name for p in dest.iterdir()) == sorted([".git", *entries])


def test_init_over_a_project_says_how_to_build_it_or_start_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `kernelforge init my-relu` run twice: the project is left alone, and
    the error gives the commands meant (run from the project too)."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", "my-relu"]) == 0
    toml = (tmp_path / "my-relu" / "build.toml").read_text()
    capsys.readouterr()
    for argv, dest, build, beside in (
            (["init", "my-relu"], "my-relu", "my-relu", "my-relu-2"),
            (["init", "my-relu", str(tmp_path / "my-relu")], str(tmp_path / "my-relu"),
             str(tmp_path / "my-relu"), str(tmp_path / "my-relu-2")),
            (["init", "my-relu", "."], ".", ".", "../my-relu-2")):
        if dest == ".":
            monkeypatch.chdir(tmp_path / "my-relu")
        assert main(argv) == 1
        assert capsys.readouterr().err == (
            f"error: {dest} exists and is not empty: it holds a kernel project already (its "
            "build.toml), which init leaves as it is; to build that project, run "
            f"'kernelforge build {build}'; to start another, give init a new directory, "
            f"e.g. 'kernelforge init my-relu {beside}'\n")
    assert (tmp_path / "my-relu" / "build.toml").read_text() == toml
    assert main(["init", "my-relu", "../my-relu-2"]) == 0  # the example given works
    assert (tmp_path / "my-relu-2" / "build.toml").is_file()


def test_init_renames_identifiers_and_leaves_prose_about_torch_alone(tmp_path: Path) -> None:
    dest = tmp_path / "gelu"
    assert main(["init", "fast-gelu", str(dest)]) == 0
    files = {p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*")
             if p.is_file()}
    assert set(files) == {"build.toml", "torch-ext/torch_binding.cpp",
                          "torch-ext/torch_binding.h", "torch-ext/fast_gelu/__init__.py",
                          "fast_gelu_cpu/fast_gelu_cpu.cpp", "fast_gelu_cuda/fast_gelu_cuda.cu",
                          "tests/test_fast_gelu.py", "README.md", ".gitignore"}
    # the build's outputs, bytecode and pytest's cache stay out of git status
    assert [line for line in files[".gitignore"].splitlines() if not line.startswith("#")] == [
        "/build/", "/.kernelforge/", "__pycache__/", "/.pytest_cache/"]
    text = "\n".join(files.values())
    # arguments continued on the next line stay under the renamed function's parenthesis
    for rel, head in (("fast_gelu_cuda/fast_gelu_cuda.cu", "__global__ void fast_gelu_kernel("),
                      ("fast_gelu_cpu/fast_gelu_cpu.cpp", "void fast_gelu_range(")):
        lines = files[rel].splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(head))
        following = lines[at + 1]
        assert len(following) - len(following.lstrip(" ")) == len(head), (rel, following)
    assert "torch.fast_gelu" not in text
    assert "as in ``torch.relu``" in files["torch-ext/fast_gelu/__init__.py"]
    assert "NaN propagated like torch.relu" in files["fast_gelu_cpu/fast_gelu_cpu.cpp"]
    assert 'ops.def("fast_gelu(Tensor! out, Tensor input) -> ()")' in (
        files["torch-ext/torch_binding.cpp"])
    assert "def fast_gelu(x: torch.Tensor" in files["torch-ext/fast_gelu/__init__.py"]
    assert "ops.fast_gelu(out, x)" in files["torch-ext/fast_gelu/__init__.py"]
    assert "__global__ void fast_gelu_kernel(" in files["fast_gelu_cuda/fast_gelu_cuda.cu"]
    assert 'name = "fast-gelu"' in files["build.toml"]
    assert "[kernel.fast_gelu_cpu]" in files["build.toml"] and "kernels-community" not in text
    # every remaining 'relu' is prose about PyTorch's op, never an identifier of ours
    import re

    assert set(re.findall(r"[\w.]*relu\w*", text)) == {"torch.relu"}


# --- check: what build would refuse --------------------------------------------------------


_BINDING = 'src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]'
_GENERAL = ('[general]\nname = "kk"\nversion = 1\nedition = 5\nlicense = "Apache-2.0"\n'
            'backends = {backends}\n')


def _kernel(name: str, backend: str, src: str, depends: str = '["torch"]') -> str:
    return f'[kernel.{name}]\nbackend = "{backend}"\ndepends = {depends}\nsrc = {src}\n'


@pytest.mark.parametrize(("backends", "rest", "message"), [
    ('["cpu", "cuda"]', f'[torch]\n{_BINDING}\n' + _kernel("k", "cuda", '["k_cuda/k.cu"]'),
     "key 'general.backends': lists 'cpu', but no [kernel.*] section has backend = \"cpu\""),
    ('["cpu"]', f'[torch]\n{_BINDING}\n',
     "key 'general.backends': lists 'cpu', but no [kernel.*] section"),
    ('["cpu"]', '[torch]\nsrc = ["torch-ext/torch_binding.h"]\n'
     + _kernel("k", "cpu", '["k_cpu/k.h"]'),
     "key 'kernel.k.src': backend 'cpu' has nothing to compile"),
    ('["cuda"]', f'[torch]\n{_BINDING}\n'
     + _kernel("k", "cuda", '["k_cuda/k.cu"]', '["torch", "cutlass_3_9"]'),
     "key 'kernel.k.depends': kernel dependency 'cutlass_3_9' has no pinned package"),
    ('["cuda"]', f'[torch]\n{_BINDING}\n'
     + _kernel("k", "cuda", '["k_cuda/k.cu"]', '["cutlass_4_6"]'),
     "'cutlass_4_6' has no pinned package"),
    ('["cpu"]', f'[torch]\n{_BINDING}\nminver = "2.9"\nmaxver = "2.5"\n'
     + _kernel("k", "cpu", '["k_cpu/k.cpp"]'),
     "key 'torch.maxver': is 2.5, lower than torch.minver 2.9"),
    ('["cpu"]', f'[torch]\n{_BINDING}\nminver = "2.10"\nmaxver = "2.9"\n'
     + _kernel("k", "cpu", '["k_cpu/k.cpp"]'), "lower than torch.minver 2.10"),
])
def test_check_reports_what_build_refuses(backends: str, rest: str, message: str,
                                          tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h",
                "torch-ext/kk/__init__.py", "k_cuda/k.cu", "k_cpu/k.cpp",
                "k_cpu/k.h"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(_GENERAL.format(backends=backends) + rest)
    from kernelforge.manifest import check_project

    check_project(root)  # a valid manifest whose files exist: only the build rules fail
    assert main(["check", str(root)]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and "fix: " in captured.err, captured.err
    assert "ok" not in captured.out


def test_check_reports_every_problem_at_once(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A missing source (the project's files) and an empty torch range (what the build
    needs) are two mistakes: check names both, in one error."""
    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h",
                "torch-ext/kk/__init__.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(
        _GENERAL.format(backends='["cpu"]') + f'[torch]\n{_BINDING}\nminver = "2.9"\n'
        'maxver = "2.5"\n' + _kernel("k", "cpu", '["k_cpu/k.cpp"]'))
    assert main(["check", str(root)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {root / 'build.toml'}: 2 problems:\n")
    assert "  - key 'kernel.k.src': lists 'k_cpu/k.cpp', but" in captured.err
    assert "  - key 'torch.maxver': is 2.5, lower than torch.minver 2.9" in captured.err
    assert "ok" not in captured.out
    # Two mistakes of the manifest itself, through the command as users run it.
    (root / "k_cpu").mkdir()
    (root / "k_cpu" / "k.cpp").write_text("")
    text = (root / "build.toml").read_text()
    (root / "build.toml").write_text(text.replace("license", "licence").replace(
        'backend = "cpu"', 'backend = "cpu"\ncxxflags = []'))
    proc = run_cli("check", str(root))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "2 problems:" in proc.stderr
    assert "key 'general.licence': unknown key 'licence'" in proc.stderr
    assert "key 'kernel.k.cxxflags': unknown key 'cxxflags'" in proc.stderr
    assert "did you mean 'cxx-flags'?" in proc.stderr


def test_check_accepts_a_range_of_one_version_written_two_ways(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """minver 2.8.0 and maxver 2.8 are the same version to the build (packaging's
    comparison), so check does not call the range empty."""
    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h",
                "torch-ext/kk/__init__.py", "k_cpu/k.cpp"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(
        _GENERAL.format(backends='["cpu"]') + f'[torch]\n{_BINDING}\nminver = "2.8.0"\n'
        'maxver = "2.8"\n' + _kernel("k", "cpu", '["k_cpu/k.cpp"]'))
    assert main(["check", str(root)]) == 0, capsys.readouterr().err


def test_check_notes_a_dependency_not_installed_here(tmp_path: Path, monkeypatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    real = importlib.metadata.version

    def version(dist: str) -> str:
        if dist == "nvidia-cutlass":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/kk/__init__.py", "k_cuda/k.cu"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(
        _GENERAL.format(backends='["cuda"]') + '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
        + _kernel("k", "cuda", '["k_cuda/k.cu"]', '["torch", "cutlass_3_6"]'))
    assert main(["check", str(root)]) == 0
    out = capsys.readouterr().out
    assert "build.toml: ok" in out
    assert "note: kernel.k: kernel dependency 'cutlass_3_6' needs the nvidia-cutlass headers" \
        in out and "pip install nvidia-cutlass==3.6.0.0" in out


def test_check_calls_only_noarch_projects_noarch(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "k"
    (root / "torch-ext" / "kk").mkdir(parents=True)
    (root / "torch-ext" / "kk" / "__init__.py").write_text("")
    (root / "build.toml").write_text(_GENERAL.format(backends='["cpu", "cuda"]')
                                     + "[torch-noarch]\n")
    assert main(["check", str(root)]) == 0
    assert "kernels: none (noarch)" in capsys.readouterr().out


def test_malformed_local_kernels_is_an_error_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LOCAL_KERNELS", "me/k1")
    assert main(["info", "me/k1"]) == 1
    err = capsys.readouterr().err
    assert "error: LOCAL_KERNELS: malformed entry 'me/k1'" in err
    assert "fix: correct LOCAL_KERNELS or unset it" in err


def test_local_kernels_naming_a_repo_twice_is_an_error_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # entries that name me/k1 only in other cases, with different paths: ambiguous
    monkeypatch.setenv("LOCAL_KERNELS", f"Me/k1={tmp_path / 'a'}:ME/K1={tmp_path / 'b'}")
    assert main(["info", "me/k1", "--hub", str(tmp_path / "hub")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: LOCAL_KERNELS: me/k1 is named by several entries"), err
    assert "fix: correct LOCAL_KERNELS or unset it" in err


@pytest.mark.parametrize(("src", "message"), [
    ('["k_cpu/k.cpp", "k_cpu/k.cpp"]',
     "key 'kernel.k.src': lists the source 'k_cpu/k.cpp' twice"),
    ('["k_cpu/k.cpp", "./k_cpu/k.cpp"]',
     "key 'kernel.k.src': lists the source 'k_cpu/k.cpp' (as './k_cpu/k.cpp') twice"),
    ('["torch-ext/torch_binding.cpp", "k_cpu/k.cpp"]',
     "key 'kernel.k.src': lists the source 'torch-ext/torch_binding.cpp' and torch.src "
     "lists it too"),
    ('["k_cpu/k.cpp", "k_cpu/k.c"]',
     "key 'kernel.k.src': lists 'k_cpu/k.cpp' and 'k_cpu/k.c', which would compile to the "
     "same object file k_cpu/k.o"),
])
def test_sources_compiling_to_one_object_are_refused_by_check_and_build(
        src: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch's ninja file names objects after the source without its suffix: a source
    listed twice, or foo.cpp beside foo.c, would give ninja two rules for one object."""
    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h",
                "torch-ext/kk/__init__.py", "k_cpu/k.cpp", "k_cpu/k.c"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(_GENERAL.format(backends='["cpu"]')
                                     + f"[torch]\n{_BINDING}\n" + _kernel("k", "cpu", src))
    for command in (["check", str(root)], ["build", str(root), "--backend", "cpu"]):
        assert main(command) == 1
        captured = capsys.readouterr()
        assert message in captured.err and "fix: " in captured.err, captured.err
        assert "ninja" not in captured.err and "Traceback" not in captured.err
    assert not (root / "build").exists()


def test_same_stem_sources_in_different_sections_or_backends_are_fine(tmp_path: Path) -> None:
    from kernelforge.manifest import check_buildable, check_project

    root = tmp_path / "k"
    for rel in ("torch-ext/torch_binding.cpp", "torch-ext/kk/__init__.py", "k/k.cpp", "k/k.c",
                "k/k.cu"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "build.toml").write_text(
        _GENERAL.format(backends='["cpu", "cuda"]')
        + '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
        + _kernel("a", "cpu", '["k/k.cpp", "k/k.h"]') + _kernel("b", "cpu", '["k/k.c"]')
        + _kernel("c", "cuda", '["k/k.cu", "k/k.h", "k/k.h"]'))
    (root / "k" / "k.h").write_text("")
    check_buildable(check_project(root))


def test_build_says_when_arch_had_no_effect(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "k"
    (root / "torch-ext" / "kk").mkdir(parents=True)
    (root / "torch-ext" / "kk" / "__init__.py").write_text("")
    (root / "build.toml").write_text(_GENERAL.format(backends='["cpu"]') + "[torch-noarch]\n")
    assert main(["build", str(root), "--arch", "9.0a"]) == 0
    assert "note: --arch 9.0a had no effect: the project is noarch" in capsys.readouterr().err


@pytest.mark.parametrize(("variant", "noted"), [("torch213-cxx11-cpu-x86_64-linux", True),
                                                ("torch213-cxx11-cu128-x86_64-linux", False)])
def test_build_notes_arch_without_a_gpu_variant(variant: str, noted: bool,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A compiled project whose build made no CUDA or ROCm variant (no CUDA torch here):
    --arch changed nothing, and the build says so."""
    import kernelforge.build as build
    from kernelforge.build import BuildResult

    monkeypatch.setattr(build, "build_project", lambda *a, **k: [
        BuildResult(variant, "cpu", Path("build") / variant, True, 0.0)])
    assert main(["build", str(EXAMPLE_RELU), "--arch", "9.0a"]) == 0
    err = capsys.readouterr().err
    assert ("note: --arch 9.0a had no effect: no CUDA or ROCm variant was built (the skipped "
            "backends above say why)" in err) == noted


def test_arch_note_names_the_right_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing was skipped when --backend chose cpu, or the project has no GPU kernels:
    the note must not point at skipped backends."""
    import kernelforge.build as build
    from kernelforge.build import BuildResult

    variant = "torch213-cxx11-cpu-x86_64-linux"
    monkeypatch.setattr(build, "build_project", lambda *a, **k: [
        BuildResult(variant, "cpu", Path("build") / variant, True, 0.0)])
    assert main(["build", str(EXAMPLE_RELU), "--backend", "cpu", "--arch", "9.0a"]) == 0
    err = capsys.readouterr().err
    assert "note: --arch 9.0a had no effect: --backend cpu builds no CUDA or ROCm variant" in err
    assert "skipped" not in err
    root = tmp_path / "k"
    (root / "k").mkdir(parents=True)
    (root / "k" / "k.cpp").write_text("")
    (root / "torch-ext" / "kk").mkdir(parents=True)
    (root / "torch-ext" / "kk" / "__init__.py").write_text("")
    (root / "torch-ext" / "torch_binding.cpp").write_text("")
    (root / "build.toml").write_text(_GENERAL.format(backends='["cpu"]')
                                     + '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
                                     + _kernel("a", "cpu", '["k/k.cpp"]'))
    assert main(["build", str(root), "--arch", "9.0a"]) == 0
    err = capsys.readouterr().err
    assert "had no effect: the project has no CUDA or ROCm kernels" in err
    assert "skipped" not in err


def test_a_no_op_build_says_up_to_date_once(built_relu: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(built_relu), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("up to date") == 1, out
    variant = next(p.name for p in (built_relu / "build").iterdir() if not p.name.startswith("."))
    assert f"{variant}: up to date -> {built_relu / 'build' / variant}\n" in out, out


def test_build_prints_where_each_variant_is(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Up-to-date variants get a path in the summary like built ones; the library's own
    "<variant>: up to date" progress line is not printed as well. Other progress lines
    pass through in order, and a failed build still shows what was up to date."""
    import kernelforge.build as build
    from kernelforge.build import BuildResult
    from kernelforge.errors import BuildError

    cpu, cuda = "torch213-cxx11-cpu-x86_64-linux", "torch213-cxx11-cu128-x86_64-linux"

    def fake(*args: object, progress=print, **kw: object) -> list[BuildResult]:
        progress("note: something")
        progress(f"{cpu}: up to date")
        progress(f"{cuda}: building k (cuda, ops namespace _k_cuda_1234567)")
        if kw.get("force"):
            raise BuildError("nvcc failed")
        return [BuildResult(cpu, "cpu", Path("/p/build") / cpu, True, 0.0),
                BuildResult(cuda, "cuda", Path("/p/build") / cuda, False, 2.0)]

    monkeypatch.setattr(build, "build_project", fake)
    assert main(["build", "p"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "note: something",
        f"{cuda}: building k (cuda, ops namespace _k_cuda_1234567)",
        f"{cpu}: up to date -> /p/build/{cpu}",
        f"{cuda}: built in 2.0s -> /p/build/{cuda}",
    ]
    assert main(["build", "p", "--force"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == f"{cpu}: up to date"
    assert "error: nvcc failed" in captured.err


def test_check_says_its_notes_when_it_also_has_errors(tmp_path: Path, capsys) -> None:
    """A note (an unknown architecture left out) is not lost behind the errors."""
    assert main(["init", "my-relu", str(tmp_path / "p")]) == 0
    manifest = tmp_path / "p" / "build.toml"
    text = manifest.read_text()
    text = text.replace('src = ["my_relu_cuda/my_relu_cuda.cu"]',
                        'src = ["my_relu_cuda/my_relu_cuda.cu"]\n'
                        'cuda-capabilities = ["9.0", "11.8"]')
    manifest.write_text(text.replace("my_relu_cpu/my_relu_cpu.cpp", "my_relu_cpu/gone.cpp"))
    capsys.readouterr()
    assert main(["check", str(tmp_path / "p")]) == 1
    err = capsys.readouterr().err
    assert "note: kernel.my_relu.cuda-capabilities: unknown CUDA capability '11.8'" in err
    assert "gone.cpp" in err


def test_publish_and_versions_name_the_repository_as_the_hub_keeps_it(
        tmp_path: Path, capsys) -> None:
    import shutil

    from kf_sharing import make_variant, uid
    from kf_testutil import write_noarch_project

    project = write_noarch_project(tmp_path / "p")
    make_variant(project, "torch-cpu", module_id=uid("na"))
    hub = str(tmp_path / "hub")
    assert main(["publish", str(project), "--repo", "Me/Relu", "--hub", hub]) == 0
    shutil.rmtree(project / "build")
    make_variant(project, "torch-cpu", module_id=uid("na2"), value=2)
    capsys.readouterr()
    assert main(["publish", str(project), "--repo", "me/RELU", "--hub", hub]) == 0
    assert capsys.readouterr().out.startswith("published Me/Relu version 1")
    assert main(["versions", "ME/RELU", "--hub", hub]) == 0
    assert capsys.readouterr().out.startswith(f"Me/Relu in {hub}")


@pytest.mark.parametrize("stray", ["file", "project"])
def test_demo_refuses_a_hub_it_cannot_publish_to_before_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stray: str) -> None:
    from kernelforge import build, demo
    from kernelforge.errors import HubError

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the demo built before finding that its hub is unusable")

    monkeypatch.setattr(build, "build_project", no_build)
    hub = tmp_path / "hub"
    if stray == "file":
        hub.write_text("")
    else:  # a kernel project given as --hub by mistake
        (hub / "torch-ext").mkdir(parents=True)
        (hub / "build.toml").write_text("")
    with pytest.raises(HubError, match="cannot write to the hub"):
        demo.run_demo(hub=hub, workspace=tmp_path / "ws", say=lambda line: None)
    assert not (tmp_path / "ws").exists()


def test_versions_gives_each_revision_one_line(tmp_path: Path, capsys) -> None:
    """A message of several lines (as `git commit -m` takes them) or with control
    characters stays on its revision's line: its first line, '...' for the rest, and an
    escape sequence written out rather than sent to the terminal."""
    from kf_sharing import make_variant, uid
    from kf_testutil import write_noarch_project

    project = write_noarch_project(tmp_path / "p")
    make_variant(project, "torch-cpu", module_id=uid("ml"))
    hub = str(tmp_path / "hub")
    message = "Fix the\tkernel \x1b[31mnow\n\nA longer description.\nOver two lines."
    assert main(["publish", str(project), "--repo", "me/k", "--hub", hub, "-m", message]) == 0
    capsys.readouterr()
    assert main(["versions", "me/k", "--hub", hub]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"me/k in {hub}" and lines[1] == "  v1"
    assert lines[2].endswith("  Fix the\\tkernel \\x1b[31mnow ..."), lines
    assert lines[3:] == ["      torch-cpu"]


def test_versions_of_a_repository_with_no_revision_is_an_error_line(tmp_path: Path,
                                                                     capsys) -> None:
    """What a first publish killed before its revision leaves (the repository's folders,
    no branch): a failure, said on stderr as every error is, not on stdout."""
    hub = tmp_path / "hub"
    (hub / "me" / "k" / "refs" / "heads").mkdir(parents=True)
    (hub / "me" / "k" / "objects").mkdir()
    assert main(["versions", "me/k", "--hub", str(hub)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: me/k: no versions published in {hub}\n"


def test_publish_of_a_build_toml_gives_the_builder_cards_path(
        unbuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """publish takes the project's build.toml as it takes its directory; the --card the
    note suggests named build.toml/build/CARD.md, a path that cannot exist."""
    _fake_build(unbuilt, None)
    card = unbuilt / "build" / "CARD.md"
    card.write_text("# k-one\n\nRendered.\n")
    hub = LocalHub(tmp_path / "hub")
    assert main(["publish", str(unbuilt / "build.toml"), "--repo", "me/k", "--hub",
                 str(hub.root)]) == 0
    assert f"add --card {card}\n" in capsys.readouterr().err


_INTERRUPT_AT = """\
import importlib.abc, os, signal, sys
AT = sys.argv.pop(1)
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == AT:  # Ctrl-C as this module starts importing
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
# what the console script pip writes for [project.scripts] does
from {module} import {function}
sys.exit({function}())
"""


@pytest.mark.parametrize("at", ["kernelforge.cli", "kernelforge.cli_share",
                                "kernelforge.hub.base"])
def test_ctrl_c_while_the_command_starts_exits_130_without_a_traceback(at: str) -> None:
    """A Ctrl-C while the command's modules are imported (kernelforge.cli, .cli_share) or
    its arguments read (repo_arg imports kernelforge.hub.base) says 'interrupted' and
    exits 130, as one while the command runs does."""
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    entry = toml_loads(pyproject)["project"]["scripts"]["kernelforge"]
    module, function = entry.split(":")
    script = _INTERRUPT_AT.format(module=module, function=function)
    proc = subprocess.run([sys.executable, "-c", script, at, "versions", "org/name"],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted\n")


# What a command imported by the time it ended (argparse's exit for --help included).
_IMPORTED = ("import sys\n"
             "from kernelforge.cli import main\n"
             "try:\n"
             "    code = main(sys.argv[1:])\n"
             "finally:\n"
             "    print(' '.join(m for m in ('torch', 'importlib.metadata') if m in sys.modules))\n"
             "sys.exit(code)\n")


def _imported_by(*argv: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _IMPORTED, *argv], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1].split() if proc.stdout.strip() else []


def test_commands_that_need_no_torch_start_without_importing_it(tmp_path: Path,
                                                                 built_relu: Path) -> None:
    """torch takes most of a second to import: only what a load in this process would
    pick (`info`, `demo`) needs it. Nor do `check`, `publish` and `versions` import
    importlib.metadata (only a build reads the versions of setuptools and of `depends`
    packages), which cost them a tenth of their time."""
    from kf_testutil import write_noarch_project

    project = write_noarch_project(tmp_path / "na")
    assert main(["build", str(project)]) == 0
    assert main(["publish", str(project), "--repo", "org/na"]) == 0
    for argv in (["info", "--help"], ["check", str(built_relu)], ["check", str(project)],
                 ["build", str(project)], ["publish", str(project), "--repo", "org/na"],
                 ["versions", "org/na"], ["cache", "list"]):
        assert _imported_by(*argv) == [], argv
    # a compiled project's up-to-date build reads setuptools' version, and imports no torch
    assert "torch" not in _imported_by("build", str(built_relu), "--backend", "cpu")
