"""Calls written for Hugging Face's ``kernels`` loader work with kernelforge's: the same
arguments, in the same order, and ``user_agent`` sent with the Hub's downloads."""
from __future__ import annotations

import importlib
import inspect
import json
import re
import types
from pathlib import Path
from typing import Any

import pytest
from kf_sharing import FakeHfApi, isolate, make_variant, uid

import kernelforge
from kernelforge import loader
from kernelforge.hub import hf as hf_module
from kernelforge.hub.hf import HfHub, sent_as

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/agent"
#: Their loader functions that kernelforge answers to by the same name.
NAMES = ("get_kernel", "has_kernel", "get_local_kernel", "get_locked_kernel", "load_kernel")


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _positional(fn: Any) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _all_names(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters)


@pytest.mark.parametrize("name", NAMES)
def test_every_argument_of_theirs_is_ours_in_their_order(name: str) -> None:
    theirs = pytest.importorskip("kernels")
    hf_fn, our_fn = getattr(theirs, name), getattr(kernelforge, name)
    missing = _all_names(hf_fn) - _all_names(our_fn)
    assert not missing, f"{name} lacks {sorted(missing)} of kernels {theirs.__version__}"
    ours = _positional(our_fn)
    assert _positional(hf_fn) == ours[:len(_positional(hf_fn))]
    our_params = inspect.signature(our_fn).parameters
    for param in inspect.signature(hf_fn).parameters.values():
        assert our_params[param.name].default == param.default, (name, param.name)
        if param.kind == param.KEYWORD_ONLY:  # ours may take it by position as well
            assert our_params[param.name].kind in (param.KEYWORD_ONLY,
                                                   param.POSITIONAL_OR_KEYWORD)


# What the signatures of Hugging Face's kernels say, from 0.17.2 (keyword-only after the
# first argument, user_agent and trust_remote_code in get_local_kernel) and from their main
# branch (positional, none of those in get_local_kernel): ours takes the union.
OUR_ORDER = {
    "get_kernel": ["repo_id", "revision", "version", "backend", "user_agent",
                   "trust_remote_code"],
    "has_kernel": ["repo_id", "revision", "version", "backend"],
    "get_local_kernel": ["repo_path", "backend"],
    "get_locked_kernel": ["repo_id"],
    "load_kernel": ["repo_id"],
}


@pytest.mark.parametrize("name", NAMES)
def test_positional_arguments_are_theirs(name: str) -> None:
    assert _positional(getattr(kernelforge, name)) == OUR_ORDER[name]
    assert {"trust_remote_code", "user_agent"} <= _all_names(kernelforge.get_local_kernel)


def _published(tmp_path: Path, remote: FakeHfApi, module_id: str) -> None:
    root = tmp_path / "p"
    make_variant(root, "torch-cpu", module_id=module_id)
    HfHub(api=remote, cache=tmp_path / "pubcache").publish(REPO, root, version=1)


class _Clients:
    """A stand-in ``huggingface_hub`` whose ``HfApi`` records how each client was made
    and which methods each served, all answered by one fake remote."""

    def __init__(self, remote: FakeHfApi) -> None:
        self.remote = remote
        self.made: list[dict[str, Any]] = []
        self.calls: list[tuple[int, str, tuple[Any, ...]]] = []

    def HfApi(self, **kwargs: Any) -> Any:  # noqa: N802 - the name huggingface_hub uses
        index = len(self.made)
        self.made.append(kwargs)
        calls, remote = self.calls, self.remote

        class Client:
            def __getattr__(self, method: str) -> Any:
                real = getattr(remote, method)

                def call(*args: Any, **kw: Any) -> Any:
                    calls.append((index, method, args))
                    return real(*args, **kw)
                return call
        return Client()

    def module(self) -> types.ModuleType:
        real = importlib.import_module("huggingface_hub")
        mod = types.ModuleType("huggingface_hub")
        mod.__dict__.update(real.__dict__)  # errors and constants as they are
        mod.HfApi = self.HfApi  # type: ignore[attr-defined]
        return mod


def test_user_agent_goes_with_the_downloads_only(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    remote = FakeHfApi(tmp_path / "remote")
    module_id = uid("agent")
    _published(tmp_path, remote, module_id)
    clients = _Clients(remote)
    fake = clients.module()
    monkeypatch.setattr(hf_module, "_huggingface_hub", lambda: fake)
    hub = HfHub(cache=tmp_path / "cache")
    agent = {"app": "demo", "run": "7"}
    # by position, as a call written for Hugging Face's kernels may pass them
    module = kernelforge.get_kernel(REPO, None, 1, "cpu", agent, True, hub=hub)
    assert module.__name__ == module_id
    by_agent = {i: m.get("user_agent") for i, m in enumerate(clients.made)}
    assert all(m["library_name"] == "kernelforge" for m in clients.made)
    downloads = [i for i, method, _ in clients.calls if method == "hf_hub_download"]
    others = [i for i, method, _ in clients.calls if method != "hf_hub_download"]
    assert downloads and all(by_agent[i] == agent for i in downloads)
    assert others and all(by_agent[i] is None for i in others)
    assert sorted(remote.fetches()) == sorted(set(remote.fetches()))


def test_a_client_given_to_the_hub_is_used_as_it_is(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    remote = FakeHfApi(tmp_path / "remote")
    module_id = uid("given")
    _published(tmp_path, remote, module_id)

    def no_new_client() -> Any:
        raise AssertionError("a hub with its own client made another")
    monkeypatch.setattr(hf_module, "_huggingface_hub", no_new_client)
    hub = HfHub(api=remote, cache=tmp_path / "cache")
    module = loader.get_kernel(REPO, version=1, backend="cpu", hub=hub, user_agent="app/1",
                               trust_remote_code=True)
    assert module.__name__ == module_id and remote.fetches()


@pytest.mark.parametrize("bad", [3, ["app"], {1: "x"}, b"app"])
def test_a_user_agent_huggingface_hub_cannot_send_is_refused(bad: object,
                                                             tmp_path: Path) -> None:
    for call in (lambda: kernelforge.get_kernel(REPO, user_agent=bad),
                 lambda: kernelforge.get_local_kernel(tmp_path, user_agent=bad)):
        with pytest.raises(TypeError, match="user_agent must be a string"):
            call()


def test_an_inner_load_without_user_agent_keeps_the_callers() -> None:
    seen: list[object] = []
    with loader._sending("outer/1"):
        with loader._sending(None):  # a kernel-depends load inside get_kernel passes none
            seen.append(hf_module._user_agent.get())
        with sent_as(None):
            seen.append(hf_module._user_agent.get())
        with loader._sending({"inner": "2"}):
            seen.append(hf_module._user_agent.get())
        seen.append(hf_module._user_agent.get())
    seen.append(hf_module._user_agent.get())
    assert seen == ["outer/1", "outer/1", {"inner": "2"}, "outer/1", None]


def test_kernel_depends_downloads_send_the_callers_user_agent(tmp_path: Path,
                                                              monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("kernels.deps")  # the kernel's import reaches its dependency so
    dep = "kernels-test/agentdep"
    remote = FakeHfApi(tmp_path / "remote")
    publisher = HfHub(api=remote, cache=tmp_path / "pubcache")
    make_variant(tmp_path / "dep", module_id=uid("dep"))
    publisher.publish(dep, tmp_path / "dep", version=1)
    main = make_variant(tmp_path / "main", module_id=uid("main"))
    meta = json.loads((main / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": dep, "version": 1}]
    (main / "metadata.json").write_text(json.dumps(meta))
    publisher.publish(REPO, tmp_path / "main", version=1)
    clients = _Clients(remote)
    fake = clients.module()
    monkeypatch.setattr(hf_module, "_huggingface_hub", lambda: fake)
    kernelforge.get_kernel(REPO, version=1, backend="cpu", user_agent="app/9",
                           trust_remote_code=True, hub=HfHub(cache=tmp_path / "cache"))
    downloads = [(clients.made[i].get("user_agent"), args[0])
                 for i, method, args in clients.calls if method == "hf_hub_download"]
    assert {repo for _, repo in downloads} == {REPO, dep}
    assert all(agent == "app/9" for agent, _ in downloads)


def test_telemetry_turned_off_sends_no_user_agent(tmp_path: Path, monkeypatch) -> None:
    # as Hugging Face's kernels: the caller's agent only while telemetry is on
    pytest.importorskip("huggingface_hub")
    remote = FakeHfApi(tmp_path / "remote")
    _published(tmp_path, remote, uid("quiet"))
    clients = _Clients(remote)
    fake = clients.module()
    fake.constants = types.SimpleNamespace(HF_HUB_DISABLE_TELEMETRY=True)  # type: ignore[attr-defined]
    monkeypatch.setattr(hf_module, "_huggingface_hub", lambda: fake)
    kernelforge.get_kernel(REPO, version=1, backend="cpu", user_agent={"app": "x"},
                           trust_remote_code=True, hub=HfHub(cache=tmp_path / "cache"))
    assert clients.made and all(m.get("user_agent") is None for m in clients.made)


def test_a_string_and_a_dict_user_agent_get_clients_of_their_own(tmp_path: Path,
                                                                 monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    clients = _Clients(FakeHfApi(tmp_path / "remote"))
    fake = clients.module()
    monkeypatch.setattr(hf_module, "_huggingface_hub", lambda: fake)
    hub = HfHub(cache=tmp_path / "cache")
    made = []
    # the string is what the dict's sorted items look like written out
    for agent in ({"app": "demo"}, "[('app', 'demo')]", {"app": "demo"}):
        with sent_as(agent):
            made.append(hub._download_client())
    assert made[0] is made[2] and made[0] is not made[1]
    assert [m["user_agent"] for m in clients.made] == [{"app": "demo"}, "[('app', 'demo')]"]
    # a new agent on every call does not make clients without end
    for n in range(40):
        with sent_as(f"run/{n}"):
            hub._download_client()
    assert len(hub._agent_clients) <= hf_module._AGENT_CLIENTS


def test_get_locked_kernel_takes_user_agent(tmp_path: Path) -> None:
    from kernelforge.errors import LockError

    # checked before the lock is read, like get_kernel's
    with pytest.raises(TypeError, match="user_agent must be"):
        kernelforge.get_locked_kernel(REPO, lockfile=tmp_path / "none.lock", user_agent=3)
    with pytest.raises(LockError):
        kernelforge.get_locked_kernel(REPO, lockfile=tmp_path / "none.lock", user_agent="a/1")


def test_a_hub_of_the_callers_own_class_is_keyed_by_itself(tmp_path: Path) -> None:
    """The loader's in-process cache keys a hub of another class by the hub itself, held,
    so a later hub at the same address cannot be handed the first one's module."""
    import gc
    import weakref

    from kernelforge.hub import LocalHub, as_hub
    from kernelforge.hub.base import is_hub

    class Wrapped:
        def __init__(self, inner: LocalHub) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    first = Wrapped(LocalHub(tmp_path / "one"))
    # a wrapper is a hub on every Python (3.12's isinstance no longer sees __getattr__)
    assert is_hub(first) and not isinstance(first, LocalHub)
    assert as_hub(first) is first  # type: ignore[arg-type]
    assert not is_hub(Wrapped) and not is_hub(object())
    key = loader._hub_key(first)  # type: ignore[arg-type]
    assert key == loader._hub_key(first)  # type: ignore[arg-type]
    assert key != loader._hub_key(Wrapped(LocalHub(tmp_path / "one")))  # type: ignore[arg-type]
    alive = weakref.ref(first)
    del first
    gc.collect()
    assert alive() is not None  # held by the key: its id stays its own


def test_no_fitting_variant_is_caught_as_their_file_not_found(tmp_path: Path) -> None:
    """Hugging Face's ``kernels`` raises ``FileNotFoundError`` when no build fits, and code
    written for it (``transformers`` among it) catches that to fall back: ours is caught
    the same way, for a local build and for a hub's."""
    from kernelforge.hub import LocalHub

    project = tmp_path / "only-cuda"
    make_variant(project, "torch-cuda", module_id=uid("nofit"))
    loads = [lambda: kernelforge.get_local_kernel(project),
             lambda: kernelforge.get_local_kernel(project / "build")]
    hub = LocalHub(tmp_path / "hub")
    hub.publish(REPO, project, version=1)
    loads += [lambda: kernelforge.get_kernel(REPO, version=1, hub=hub),
              lambda: kernelforge.get_kernel(REPO, version=1, backend="cpu", hub=hub)]
    for load in loads:
        with pytest.raises(FileNotFoundError) as caught:
            load()
        assert isinstance(caught.value, kernelforge.VariantNotFoundError)
        assert "no build variant of" in str(caught.value)
    assert not kernelforge.has_kernel(REPO, version=1, hub=hub)
    theirs = pytest.importorskip("kernels")
    with pytest.raises(FileNotFoundError):  # what the same call does with theirs
        theirs.get_local_kernel(project, backend="cpu")


def test_their_has_kernel_judges_the_publisher(monkeypatch) -> None:
    """What the README says of their ``has_kernel`` beside ours (which judges no trust:
    test_tamper.py): it asks the Hub whether the publisher is trusted before anything
    else, and raises ``ValueError`` for one it does not trust rather than answering."""
    theirs = pytest.importorskip("kernels")
    hf_hub = importlib.import_module("kernels.hf_hub")
    asked: list[str] = []

    class Hub:
        def get_organization_overview(self, org: str) -> Any:
            asked.append(org)
            return types.SimpleNamespace(trustedKernelPublisher=False)

    monkeypatch.setattr(hf_hub, "_get_hf_api", lambda *args, **kwargs: Hub())
    monkeypatch.setattr(hf_hub.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ValueError, match="not from a trusted publisher"):
        theirs.has_kernel(REPO, version=1)
    assert asked == [REPO.split("/")[0]]
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "`kernels.has_kernel` 0.17 does judge its publisher" in readme


def _coming_from_kernels() -> str:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index("#### Coming from Hugging Face's `kernels`")
    return text[start:text.index("\n#", start + 1)]


def test_every_function_of_theirs_is_ours_or_named_in_the_readme() -> None:
    """Each loading function ``kernels`` exports is either kernelforge's too, or the
    README's section for users switching says what to use instead."""
    theirs = pytest.importorskip("kernels")
    section = _coming_from_kernels()
    modules = ("kernels.load", "kernels.install", "kernels.variants", "kernels.importer",
               "kernels.deps")
    functions = [name for name in theirs.__all__
                 if inspect.isfunction(getattr(theirs, name))
                 and getattr(theirs, name).__module__ in modules]
    assert "install_kernel" in functions and "get_kernel" in functions
    for name in functions:
        if hasattr(kernelforge, name):
            assert f"{name}," in section or f"{name}\n" in section or f"{name}`" in section
        else:
            assert f"`{name}`" in section, f"README does not say what replaces {name}"
    assert "kernelize" in section


def test_kernelize_takes_a_layer_of_a_kernel_kernelforge_loaded(tmp_path: Path) -> None:
    """The README's recipe: ``kernels.kernelize`` replaces a layer's forward with the layer
    of a kernel kernelforge loaded, given an object whose ``load()`` returns it."""
    torch = pytest.importorskip("torch")
    theirs = pytest.importorskip("kernels")
    from kf_testutil import write_metadata

    variant = tmp_path / "p" / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("from . import layers\n")
    (variant / "layers.py").write_text(
        "import torch\n\n\nclass Twice(torch.nn.Module):\n"
        "    def forward(self, x):\n        return 2 * x\n")
    write_metadata(variant, uid("layer"))
    kernel = kernelforge.get_local_kernel(tmp_path / "p")

    class Loaded:
        def load(self) -> type:
            return kernel.layers.Twice  # type: ignore[no-any-return]

    @theirs.use_kernel_forward_from_hub("Twice")
    class Same(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x

    with theirs.use_kernel_mapping({"Twice": {"cpu": Loaded()}}, inherit_mapping=False):
        model = theirs.kernelize(torch.nn.Sequential(Same()), mode=theirs.Mode.INFERENCE,
                                 device="cpu")
    assert model(torch.ones(2)).tolist() == [2.0, 2.0]


def _raises_section(fn: Any) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc[doc.index("Raises:"):]


@pytest.mark.parametrize("name", NAMES)
def test_a_malformed_trust_remote_code_is_the_type_error_the_docstring_says(
        name: str, tmp_path: Path) -> None:
    """A single repository id where a list is wanted is refused as a TypeError, and
    ``help()`` of each loader says so."""
    fn = getattr(kernelforge, name)
    make_variant(tmp_path / "p", module_id=uid("trust"))
    first = tmp_path / "p" if name == "get_local_kernel" else REPO
    extra: dict[str, Any] = {"lockfile": tmp_path / "kernels.lock"} if "lock" in name \
        or name == "load_kernel" else {}
    with pytest.raises(TypeError, match="trust_remote_code"):
        fn(first, trust_remote_code=REPO, **extra)
    raises = _raises_section(fn)
    assert "TypeError" in raises, name
    if name in ("get_kernel", "get_local_kernel", "has_kernel"):
        typeerror = re.split(r"\n    (?! )", raises[raises.index("TypeError"):])[0]
        assert "trust_remote_code" in typeerror, name
