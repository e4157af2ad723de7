"""Text a hub chooses, shown by kernelforge: a variant or file name, a branch, a redirect's
revision, the archs a metadata.json lists. Whoever can write a hub (another user of a
shared local hub, a hostile repository) chooses it, so none of it may start a line that
reads as kernelforge's own (``error: ...``) or act on the terminal (an escape sequence
that clears, recolours or retitles it): each is written on its own line with such
characters as escapes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from kf_sharing import FakeHfApi, isolate, make_variant, uid

from kernelforge.cli import main
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "shared-org/relu"
#: A name that, shown as it is, recolours the terminal and adds a line of its own.
FAKE = "\x1b[31m\nerror: FAKE message\x1b[0m"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _plant_variant(hub: LocalHub, commit: str, name: str) -> None:
    """Add a copy of the commit's torch-cpu variant as ``name`` to the commit and to its
    record, as someone who can write the hub can (the owner mark then fails, so it loads
    only if allowed: what the commands show of it is the point)."""
    root = hub.commit_path(REPO, commit)
    shutil.copytree(root / "build" / "torch-cpu", root / "build" / name)
    record_path = root / ".commit.json"
    record = json.loads(record_path.read_text())
    for path, digest in list(record["files"].items()):
        record["files"][path.replace("build/torch-cpu/", f"build/{name}/")] = digest
    os.chmod(record_path, 0o644)
    record_path.write_text(json.dumps(record))


def _own_lines(text: str) -> list[str]:
    """``text``'s lines, checked to hold nothing the terminal acts on."""
    assert "\x1b" not in text and "\r" not in text, text
    return text.splitlines()


def test_versions_and_info_show_a_planted_variant_name_on_one_line(env, tmp_path: Path,
                                                                  capsys) -> None:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=uid("text"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    _plant_variant(hub, commit, f"torch-cpu{FAKE}")
    escaped = "torch-cpu\\x1b[31m\\nerror: FAKE message\\x1b[0m"

    assert main(["versions", REPO, "--hub", str(env["hub"])]) == 0
    lines = _own_lines(capsys.readouterr().out)
    assert f"      {escaped}" in lines, lines
    assert not any(line.startswith("error:") for line in lines), lines

    assert main(["info", REPO, "--version", "1", "--hub", str(env["hub"])]) == 1
    captured = capsys.readouterr()
    lines = _own_lines(captured.out) + _own_lines(captured.err)
    assert any(line.startswith(f"  {escaped}: rejected") for line in lines), lines
    assert not any(line.startswith("error: FAKE") for line in lines), lines

    from kernelforge import kernel_info

    lines = _own_lines(kernel_info(REPO, version=1, hub=hub).describe())
    assert any(line.startswith(f"  {escaped}: rejected") for line in lines), lines


def test_versions_shows_a_branch_tag_and_variant_of_the_hf_hub_on_one_line(
        env, tmp_path: Path, monkeypatch, capsys) -> None:
    """The Hugging Face Hub's variants are the folders its file listing names under
    build/, whatever they are called."""
    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("text"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    api.tamper(REPO, commit, f"build/torch-cpu{FAKE}/metadata.json", b"{}")
    refs = tmp_path / "remote" / "repos" / REPO / "refs"
    (refs / "heads" / f"v2{FAKE}").write_text(commit)
    (refs / "tags").mkdir()
    (refs / "tags" / f"t{FAKE}").write_text(commit)
    monkeypatch.setattr("kernelforge.cli._hub", lambda args: hub)

    assert main(["versions", REPO, "--hub", "hf"]) == 0
    lines = _own_lines(capsys.readouterr().out)
    assert f"  v2\\x1b[31m\\nerror: FAKE message\\x1b[0m  {commit[:12]}" in lines, lines
    assert f"    t\\x1b[31m\\nerror: FAKE message\\x1b[0m  {commit[:12]}" in lines, lines
    assert "      torch-cpu\\x1b[31m\\nerror: FAKE message\\x1b[0m" in lines, lines
    assert not any(line.startswith("error:") for line in lines), lines


def test_an_error_line_writes_what_the_terminal_would_act_on_as_escapes(capsys) -> None:
    """An error keeps its own lines and tabs; a carriage return or an escape sequence in one
    (from a name the hub chose) is written out, so it cannot overwrite or hide the line."""
    from argparse import Namespace

    from kernelforge.cli import _run
    from kernelforge.errors import HubError

    def fail(args: Namespace) -> int:
        raise HubError(f"variant 'x\rerror: all good' not found\nbranches: v1{FAKE[:5]}"
                       "\n  3 |\tint x;")

    assert _run(Namespace(func=fail)) == 1
    assert _own_lines(capsys.readouterr().err) == [
        "error: variant 'x\\rerror: all good' not found", "branches: v1\\x1b[31m",
        "  3 |\tint x;"]


def test_a_file_name_the_hub_chose_is_one_line_of_the_integrity_error(env, tmp_path: Path
                                                                       ) -> None:
    from kernelforge import loader
    from kernelforge.errors import IntegrityError

    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("text"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    api.tamper(REPO, commit, f"build/torch-cpu/evil{FAKE}.py", b"")
    with pytest.raises(IntegrityError) as info:
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO])
    lines = _own_lines(str(info.value))
    assert "  extra: evil\\x1b[31m\\nerror: FAKE message\\x1b[0m.py" in lines, lines
    assert not any(line.startswith("error:") for line in lines), lines
    assert info.value.problems == [f"extra: evil{FAKE}.py"]  # as found, for programs


def test_archs_a_metadata_json_lists_are_one_line_of_the_refusal(env, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The GPU check names the archs a build's metadata.json lists in the error that
    rejects the only variant: each line of it stays one line."""
    import platform

    from kf_testutil import write_metadata

    from kernelforge import loader, variants
    from kernelforge.errors import VariantNotFoundError

    vdir = make_variant(tmp_path / "p", "torch-cuda", module_id=uid("text"))
    write_metadata(vdir, uid("text"), archs=["9.0", f"10.0{FAKE}"])
    hub = LocalHub(env["hub"])
    hub.publish(REPO, tmp_path / "p", version=1)
    gpu = variants.SystemFacts((2, 13, 0), True, "cuda", (12, 8), platform.machine(), "linux",
                               gpu_archs=("8.0",))
    monkeypatch.setattr(variants, "detect_system", lambda: gpu)
    with pytest.raises(VariantNotFoundError) as info:
        loader.get_kernel(REPO, version=1, hub=hub)
    lines = _own_lines(str(info.value))
    assert any("not covered by the build's archs (9.0, 10.0\\x1b[31m\\nerror: FAKE" in line
               for line in lines), lines
    assert not any(line.startswith("error:") for line in lines), lines


@pytest.mark.parametrize("text", ["relu-é", "カーネル/relu", "naïve café ✓", "ß∑ü 😀"])
def test_printable_text_of_any_script_is_shown_as_it_is(text: str) -> None:
    """Only what a terminal would act on is escaped: a name or message in another script
    is shown as written, in a value line and in an error's or warning's lines."""
    from kernelforge.cli import _own_lines as written
    from kernelforge.errors import one_line

    assert one_line(text) == text
    assert written(f"{text}:\n\t{text}") == f"{text}:\n\t{text}"
    assert one_line(f"{text}\u202e") == f"{text}\\u202e"  # a direction override is not
