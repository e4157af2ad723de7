"""Arguments the public API's documentation says are refused, which were once taken
silently or failed far from the call: a malformed ``trust_remote_code`` where no kernel
needed it, a string where ``build_project`` takes a list, a ``sm_90`` or zero jobs for a
build that compiles nothing for a GPU, a card or message that is no text."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kf_sharing import FakeHfApi, isolate, make_variant
from kf_testutil import copy_example, write_noarch_project

import kernelforge
from kernelforge.errors import BuildError
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def published(env: dict[str, Path], tmp_path: Path, cpu_system: None) -> str:
    """A kernel you published to the local hub: loads, locks and trust decisions need no
    ``trust_remote_code`` for it."""
    make_variant(tmp_path / "proj")
    LocalHub().publish("me/own", tmp_path / "proj", version=1)
    return "me/own"


@pytest.mark.parametrize("allow, error", [("me/own", TypeError), (["me/*"], ValueError)])
def test_kernel_info_refuses_a_malformed_trust_argument_it_does_not_need(
        published: str, allow: Any, error: type[Exception]) -> None:
    assert kernelforge.kernel_info(published).trust == (
        "trust: allowed, published to this local hub by you")
    with pytest.raises(error, match="trust_remote_code"):
        kernelforge.kernel_info(published, trust_remote_code=allow)
    with pytest.raises(error, match="trust_remote_code"):  # as the load refuses it
        kernelforge.get_kernel(published, version=1, trust_remote_code=allow)


@pytest.mark.parametrize("selector, message", [
    *(({"revision": blank},
       f"revision: expected a branch, tag or commit, got {re.escape(repr(blank))}")
      for blank in ("", " ", "\t")),
    ({"version": ""}, r"version: expected a non-negative integer, got ''"),
])
@pytest.mark.parametrize("call", [kernelforge.get_kernel, kernelforge.has_kernel,
                                  kernelforge.kernel_info])
def test_a_blank_revision_or_version_is_refused_naming_it(
        published: str, call: Callable[..., Any], selector: dict[str, Any],
        message: str) -> None:
    """Before: a blank revision went to the hub, where get_kernel said the repository
    had no such revision and has_kernel answered False, as if it were missing."""
    with pytest.raises(ValueError, match=message):
        call(published, **selector)
    assert call(published, revision="v1")


@pytest.mark.parametrize("allow, error", [("me/own", TypeError), (["me/*"], ValueError)])
def test_lock_project_refuses_a_malformed_allow_it_does_not_need(
        published: str, tmp_path: Path, allow: Any, error: type[Exception]) -> None:
    root = tmp_path / "app"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "app"\nversion = "0"\n\n'
        f'[tool.kernelforge.dependencies]\n"{published}" = 1\n')
    with pytest.raises(error, match="trust_remote_code"):
        kernelforge.lock_project(root, allow=allow)
    assert not (root / "kernelforge.lock").exists()
    assert kernelforge.lock_project(root, allow=[published]).kernels[0].repo_id == published


@pytest.mark.parametrize("kwargs, error, message", [
    ({"backends": "cpu"}, TypeError, r"backends: expected a list.*\['cpu'\]"),
    ({"archs": "9.0a"}, TypeError, r"archs: expected a list"),
    ({"archs": ["sm_90"]}, ValueError, r"archs: 'sm_90' is not a CUDA capability.*'9.0'"),
    ({"jobs": 0}, ValueError, r"jobs: expected a positive number"),
    ({"jobs": -4}, ValueError, r"jobs: expected a positive number"),
    # not a number of jobs, though Python would compare or count with it
    ({"jobs": True}, ValueError, r"jobs: expected a positive number.*got True"),
    ({"jobs": "4"}, ValueError, r"jobs: expected a positive number.*got '4'"),
    ({"jobs": 2.0}, ValueError, r"jobs: expected a positive number.*got 2\.0"),
    ({"backends": ["cpu", 1]}, TypeError, r"backends: expected backend names .*got 1"),
    # kernelforge build --arch 9.0 --arch gfx942, --backend cuda --arch gfx942, ...
    ({"archs": ["9.0", "gfx942"]}, ValueError,
     r"archs mixes CUDA capabilities \(9\.0\) and ROCm archs \(gfx942\); build one GPU "
     r"backend at a time: backends=\['cuda'\] with capabilities, or backends=\['rocm'\]"),
    ({"backends": ["cuda"], "archs": ["gfx942"]}, ValueError,
     r"archs \['gfx942'\]: backends=\['cuda'\] takes CUDA capabilities such as 9\.0a"),
    ({"backends": ["cpu", "rocm"], "archs": [" 9.0a"]}, ValueError,
     r"archs \['9\.0a'\]: backends=\['rocm'\] takes ROCm archs such as gfx942"),
])
def test_build_project_refuses_what_the_command_line_refuses(
        tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    """Before: a string was read one letter at a time ("--backend c: unknown"), and a
    CPU or noarch build took a malformed arch or no number of jobs without a word."""
    project = write_noarch_project(tmp_path / "na")
    with pytest.raises(error, match=message):
        kernelforge.build_project(project, progress=lambda _: None, **kwargs)
    assert not (project / "build").exists()
    (result,) = kernelforge.build_project(project, backends=["cpu"], archs=[" 9.0a "],
                                          jobs=1, progress=lambda _: None)
    assert result.variant == "torch-cpu" and (result.path / "metadata.json").is_file()


@pytest.mark.parametrize("call, message", [
    (lambda hub: hub.set_card("me/card", 3), "card: expected README text, got int"),
    (lambda hub: hub.set_card("me/card", "# Card", message=3), "message: expected a string"),
    (lambda hub: hub.set_status("me/card", 3), "status: expected the text of"),
    (lambda hub: hub.set_status("me/card", None, message=None), "message: expected a string"),
])
def test_local_hub_refuses_a_card_or_status_that_is_no_text(
        env: dict[str, Path], call: Callable[[LocalHub], Any], message: str) -> None:
    hub = LocalHub()
    with pytest.raises(ValueError, match=message):
        call(hub)
    assert not hub.has_repo("me/card")
    assert hub.set_card("me/card", "# Card").branch == "main"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"card": b"# Card"}, ValueError, "card: expected README text, got bytes"),
    ({"message": None}, ValueError, "message: expected a string"),
    ({"signer": "key.pem"}, TypeError, "signer: expected a SigningKey"),
    ({"version": -1}, ValueError, "version: expected a non-negative integer, got -1"),
    ({"version": "1"}, ValueError, "version: expected a non-negative integer, got '1'"),
    ({"version": True}, ValueError, "version: expected a non-negative integer, got True"),
    ({"repo_id": "me"}, ValueError, "repo_id: 'me' is not a valid repository id"),
    ({"repo_id": "me/hf/x"}, ValueError, "repo_id: 'me/hf/x' is not a valid repository id"),
    # once the current directory: here the project, published as if "." were given
    *(({"build_dir": blank}, ValueError, r"build_dir: an empty path is not a build \(it "
       r"would mean the current directory\); pass the project's build/ directory")
      for blank in ("", " ")),
])
def test_hf_hub_publish_refuses_arguments_as_the_local_hub_does(
        env: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    pytest.importorskip("huggingface_hub")
    remote = FakeHfApi(tmp_path / "remote")
    make_variant(tmp_path / "proj")
    monkeypatch.chdir(tmp_path / "proj")
    hub = HfHub(api=remote, cache=env["cache"])
    arguments = {"repo_id": "me/hf", "build_dir": tmp_path / "proj", "version": 1, **kwargs}
    for publish in (hub.publish, LocalHub().publish):
        with pytest.raises(error, match=message):
            publish(**arguments)
    assert not hub.has_repo("me/hf") and not LocalHub().has_repo("me/hf")
    assert not (tmp_path / "remote" / "repos").exists()  # the Hub was not called
    assert hub.publish("me/hf", tmp_path / "proj", version=1, card="# Card").branch == "v1"


def test_build_project_reads_backends_given_as_a_generator_once(tmp_path: Path) -> None:
    """Before: the first check used the generator up, and the build said that none of
    the project's backends could be built here, listing none."""
    project = copy_example(tmp_path / "relu")
    for backends in (["rocm"], ("rocm",), (b for b in ["rocm"])):
        with pytest.raises(BuildError, match=r"backend rocm has no kernels in this "
                                             r"project \(it has: cpu, cuda\)"):
            kernelforge.build_project(project, backends=backends, progress=lambda _: None)
    assert not (project / "build").exists()


def test_build_project_takes_jobs_of_any_integer_type(tmp_path: Path) -> None:
    """``jobs=np.int64(4)`` (a count worked out with numpy) builds, as it did before
    the check; a float or a string is refused, naming the fix."""
    numpy = pytest.importorskip("numpy")
    project = write_noarch_project(tmp_path / "na")
    (result,) = kernelforge.build_project(project, jobs=numpy.int64(4),
                                          progress=lambda _: None)
    assert result.variant == "torch-cpu" and (result.path / "metadata.json").is_file()
    for jobs in (4.0, "4", True):
        with pytest.raises(ValueError, match=r"jobs: expected a positive number of compile "
                                             r"jobs, got .*; fix: pass a positive integer"):
            kernelforge.build_project(project, jobs=jobs, progress=lambda _: None)
