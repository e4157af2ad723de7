"""The public API's documentation keeps up with its signatures: every callable that
``kernelforge`` exports, or ``kernelforge.hub`` and ``kernelforge.lock`` (and every public
method of their classes), describes each of its parameters, and no other, in its
docstring's Args section, so that a new or renamed parameter cannot go undocumented; its
Raises section names exceptions that exist. The README's Python examples call what
exists, with arguments the signatures take. ``help()`` of a hub shows its own methods
and no private base class."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kf_testutil import REPO

import kernelforge
import kernelforge.errors
import kernelforge.hub
import kernelforge.lock

SECTION_RE = re.compile(r"^(?P<indent> *)(?P<title>[A-Z][a-z]+):$")
#: ``name: ...``, ``name (type): ...`` or ``a, b, c: as for ...`` one level into a section
ENTRY_RE = re.compile(r"^(?P<names>\w+(?:, \w+)*)(?: \([^)]*\))?:(?: |$)")


def doc_section(doc: str, title: str) -> list[str] | None:
    """The parameter names a Google-style docstring section (``Args:``, ``Attributes:``)
    describes, in order; ``None`` when the docstring has no such section."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        m = SECTION_RE.match(line)
        if m is None or m["title"] != title:
            continue
        header = len(m["indent"])
        names: list[str] = []
        entry_indent: int | None = None
        for body in lines[i + 1:]:
            if not body.strip():
                continue
            indent = len(body) - len(body.lstrip())
            if indent <= header:
                break
            if entry_indent is None:
                entry_indent = indent
            if indent == entry_indent:
                entry = ENTRY_RE.match(body.strip())
                assert entry is not None, f"not a '{title}' entry: {body.strip()!r}"
                names += entry["names"].split(", ")
        return names
    return None


def parameters(fn: Callable[..., Any]) -> list[str]:
    """The names a caller may pass, ``self`` and ``cls`` left out."""
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def public_objects() -> dict[str, Any]:
    return {name: getattr(kernelforge, name) for name in kernelforge.__all__
            if name != "__version__"}


def subpackage_objects() -> dict[str, Any]:
    """``package.name`` of what ``kernelforge.hub`` and ``kernelforge.lock`` export beside
    ``kernelforge``'s own exports. A protocol (``Hub``) is left out: its methods are
    documented where a hub implements them (``LocalHub``, ``HfHub``)."""
    top = [id(obj) for obj in public_objects().values()]
    return {f"{package.__name__}.{name}": obj
            for package in (kernelforge.hub, kernelforge.lock) for name in package.__all__
            if id(obj := getattr(package, name)) not in top
            and not getattr(obj, "_is_protocol", False)}


def public_methods(objects: dict[str, Any]) -> Iterator[tuple[str, Callable[..., Any]]]:
    """``Class.method`` of every public method and classmethod of the classes among
    ``objects`` (their errors aside), inherited ones included."""
    for name, obj in objects.items():
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for attr in dir(obj):
            if attr.startswith("_"):
                continue
            static = inspect.getattr_static(obj, attr)
            if isinstance(static, (staticmethod, classmethod)) or inspect.isfunction(static):
                yield f"{name}.{attr}", getattr(obj, attr)


FUNCTIONS = sorted(n for n, o in public_objects().items() if inspect.isfunction(o))
METHODS = dict(public_methods(public_objects()))
SUBPACKAGE_FUNCTIONS = {n: o for n, o in subpackage_objects().items() if inspect.isfunction(o)}
SUBPACKAGE_METHODS = dict(public_methods(subpackage_objects()))


def returned_classes() -> dict[str, type]:
    """The kernelforge classes that the exported functions and methods return, by name
    (a ``BuildResult``, a ``Revision``, a ``KernelInfo``): a caller reads their
    attributes in ``help()`` as it reads the exports'."""
    found = {}
    for fn in [*(getattr(kernelforge, n) for n in FUNCTIONS), *METHODS.values()]:
        # a string: the modules postpone the evaluation of annotations
        annotation = str(inspect.signature(fn).return_annotation)
        for word in re.findall(r"[A-Za-z_]\w*", annotation):
            obj = fn.__globals__.get(word)
            if inspect.isclass(obj) and obj.__module__.split(".")[0] == "kernelforge":
                found[word] = obj
    return found


#: The classes whose documentation is checked: the exports, and what they return.
CLASS_OBJECTS = {**{n: o for n, o in public_objects().items() if inspect.isclass(o)},
                 **returned_classes()}
CLASS_OBJECTS.update({n: o for n, o in subpackage_objects().items()
                      if inspect.isclass(o) and o not in CLASS_OBJECTS.values()})
CLASSES = sorted(CLASS_OBJECTS)


def test_the_lists_cover_the_api() -> None:
    """The parametrized tests below see every export and the methods of the classes."""
    assert set(FUNCTIONS) | set(CLASSES) >= set(kernelforge.__all__) - {"__version__"}
    assert {"BuildResult", "KernelInfo", "KernelSpec", "LockResult", "Resolution",
            "Revision"} <= set(CLASSES) - set(kernelforge.__all__)
    assert {"get_kernel", "build_project", "lock_project", "resolve_variant"} <= set(FUNCTIONS)
    assert {"LocalHub.publish", "HfHub.publish", "Variant.parse",
            "Manifest.kernels_for", "SystemFacts.describe"} <= set(METHODS)
    assert {"kernelforge.hub.as_hub", "kernelforge.lock.read_lock"} <= set(SUBPACKAGE_FUNCTIONS)
    assert "kernelforge.lock.LockFile.require" in SUBPACKAGE_METHODS
    assert {"kernelforge.lock.LockFile", "kernelforge.lock.Requirement"} <= set(CLASSES)


@pytest.mark.parametrize("name", [*FUNCTIONS, *sorted(SUBPACKAGE_FUNCTIONS)])
def test_a_function_documents_exactly_its_parameters(name: str) -> None:
    fn = SUBPACKAGE_FUNCTIONS.get(name) or getattr(kernelforge, name)
    doc = inspect.getdoc(fn)
    assert doc, f"{name} has no docstring"
    documented = doc_section(doc, "Args") or []
    assert sorted(documented) == sorted(parameters(fn)), (
        f"{name}: its Args section names {documented}, its signature "
        f"{parameters(fn)}")
    assert len(documented) == len(set(documented)), f"{name}: a parameter named twice"


@pytest.mark.parametrize("name", sorted({**METHODS, **SUBPACKAGE_METHODS}))
def test_a_method_documents_exactly_its_parameters(name: str) -> None:
    method = {**METHODS, **SUBPACKAGE_METHODS}[name]
    doc = inspect.getdoc(method)
    assert doc, f"{name} has no docstring"
    documented = doc_section(doc, "Args") or []
    assert sorted(documented) == sorted(parameters(method)), (
        f"{name}: its Args section names {documented}, its signature "
        f"{parameters(method)}")


@pytest.mark.parametrize("name", CLASSES)
def test_a_class_documents_what_it_is_made_of(name: str) -> None:
    """A class's constructor parameters are its Args (a hub, an error) or, for a data
    class, its Attributes, which may list more (an error's ``errors``)."""
    cls = CLASS_OBJECTS[name]
    doc = inspect.getdoc(cls)
    assert doc, f"{name} has no docstring"
    if issubclass(cls, BaseException) and "__init__" not in vars(cls):
        return  # made from its message, as any exception
    wanted = parameters(cls)
    args = doc_section(doc, "Args")
    if args is not None:
        assert sorted(args) == sorted(wanted), (name, args, wanted)
        return
    attributes = doc_section(doc, "Attributes")
    assert attributes is not None, f"{name} documents neither Args nor Attributes"
    assert not set(wanted) - set(attributes), (
        f"{name}: Attributes leaves out {sorted(set(wanted) - set(attributes))}")
    if dataclasses.is_dataclass(cls):
        fields = [f.name for f in dataclasses.fields(cls)]
        assert not set(attributes) - set(fields), (
            f"{name}: Attributes names {sorted(set(attributes) - set(fields))}, no field")


def test_a_raises_section_names_exceptions_that_exist() -> None:
    """``HubError``, ``ValueError``: a builtin or one of :mod:`kernelforge.errors`, so
    that a renamed error, or a misspelt one, cannot stay in the documentation."""
    documented = {**{n: getattr(kernelforge, n) for n in FUNCTIONS}, **SUBPACKAGE_FUNCTIONS,
                  **METHODS, **SUBPACKAGE_METHODS, **CLASS_OBJECTS}
    seen = set()
    for name, obj in documented.items():
        for exc in doc_section(inspect.getdoc(obj) or "", "Raises") or []:
            cls = getattr(kernelforge.errors, exc, None) or getattr(builtins, exc, None)
            assert inspect.isclass(cls) and issubclass(cls, BaseException), (
                f"{name}: its Raises section names {exc!r}, which is no exception")
            seen.add(exc)
    assert {"HubError", "ValueError", "TypeError", "LockError"} <= seen


def alias_names(fn: Callable[..., Any]) -> list[str]:
    """The names in ``fn``'s annotations that its module binds to a type alias rather
    than to a class: ``help()`` shows such a name (``TrustArg``) where the reader wants
    the types, and no documentation says what it stands for."""
    sig = inspect.signature(fn)
    annotations = [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]
    found = []
    for annotation in annotations:
        if annotation is inspect.Parameter.empty:
            continue
        # preceded by no dot: ``os.PathLike`` is looked up as ``os``
        for word in re.findall(r"(?<![.\w])[A-Za-z_]\w*", str(annotation)):
            obj = fn.__globals__.get(word)  # a class imported for type checking only: absent
            if obj is not None and obj is not Any and not (
                    inspect.isclass(obj) or inspect.ismodule(obj)):
                found.append(word)
    return found


@pytest.mark.parametrize("name", [*FUNCTIONS, *sorted(METHODS)])
def test_help_shows_the_types_of_the_parameters_not_an_alias(name: str) -> None:
    fn = getattr(kernelforge, name) if name in FUNCTIONS else METHODS[name]
    assert not alias_names(fn), (
        f"{name}: its signature names {alias_names(fn)}, a type alias; write the types")


def test_an_alias_in_a_signature_is_found() -> None:
    """What the test above would say of a function annotated with an alias."""
    namespace: dict[str, Any] = {}
    exec("from __future__ import annotations\n"
         "from collections.abc import Sequence\n"
         "TrustArg = bool | Sequence[str]\n"
         "def f(trust: TrustArg = False, n: int | None = None) -> Sequence[str]: ...\n",
         namespace)
    assert alias_names(namespace["f"]) == ["TrustArg"]


def test_the_section_reader_reads_grouped_and_typed_entries() -> None:
    doc = ("Summary.\n\nArgs:\n    a, b: as for f.\n    c (int): one\n        more "
           "text: with a colon.\n\nReturns:\n    x: not an argument.\n")
    assert doc_section(doc, "Args") == ["a", "b", "c"]
    assert doc_section(doc, "Raises") is None


def test_a_parameter_added_without_its_description_is_found() -> None:
    """What the tests above would say of a function that gained a parameter."""
    def f(repo_id: str, *, fresh: bool = False) -> None:
        """Load it.

        Args:
            repo_id: ``org/name``.
        """
    assert doc_section(inspect.getdoc(f) or "", "Args") != parameters(f)



# --- help() of the hubs --------------------------------------------------------------------


def undocumented_bases(cls: type) -> list[str]:
    """The classes in ``cls``'s method resolution order, itself aside, that ``help(cls)``
    would show a user but the public API does not document: a kernelforge class other
    than the public :class:`~kernelforge.hub.base.Hub`, or one from a private module (a
    mixin whose methods pydoc lists as inherited from it). Python's own (``typing``,
    ``builtins``) come with any protocol and are no part of kernelforge's API."""
    return [f"{base.__module__}.{base.__qualname__}" for base in cls.__mro__[1:]
            if base is not kernelforge.hub.Hub
            and (base.__module__.split(".")[0] == "kernelforge"
                 or any(part.startswith("_") for part in base.__module__.split(".")))]


def hub_classes() -> dict[str, type]:
    from kernelforge.hub.hf import HfHub

    return {"LocalHub": kernelforge.hub.LocalHub, "HfHub": HfHub}


@pytest.mark.parametrize("name", sorted(hub_classes()))
def test_help_of_a_hub_shows_its_own_methods_and_the_public_hub_base(name: str) -> None:
    """``help(LocalHub)`` lists every public method as the hub's own, with its
    documentation, and names no private class or module among its bases."""
    import pydoc

    cls = hub_classes()[name]
    assert undocumented_bases(cls) == []
    assert kernelforge.hub.Hub in cls.__mro__
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert f"class {name}(kernelforge.hub.base.Hub)" in text
    assert not re.findall(r"kernelforge(?:\.\w+)*\._\w+", text), text
    inherited = set(re.findall(r"inherited from ([\w.]+):", text))
    assert inherited <= {"kernelforge.hub.base.Hub", "typing.Protocol", "typing.Generic",
                         "builtins.object"}, inherited
    methods = [a for a in inspect.classify_class_attrs(cls)
               if not a.name.startswith("_") and a.kind == "method"]
    assert {"publish", "fetch_variant", "resolve"} <= {a.name for a in methods}
    for attr in methods:
        assert attr.defining_class is cls, f"{name}.{attr.name} is {attr.defining_class}'s"
        assert inspect.getdoc(getattr(cls, attr.name)), f"{name}.{attr.name}: no docstring"
    if cls is kernelforge.hub.LocalHub:
        assert {"set_card", "set_status", "tag", "check_publishable"} <= {
            a.name for a in methods}


def test_a_private_base_is_found() -> None:
    """What the test above would say of a hub that takes methods from a private mixin."""
    mixin = type("LocalHubWriter", (), {"__module__": "kernelforge.hub._local_write"})
    hub = type("LocalHub", (mixin,), {"__module__": "kernelforge.hub.local"})
    assert undocumented_bases(hub) == ["kernelforge.hub._local_write.LocalHubWriter"]
    assert undocumented_bases(kernelforge.hub.LocalHub) == []

# --- the README's Python examples --------------------------------------------------------


def readme_calls() -> list[tuple[str, ast.Call]]:
    """Each call of a kernelforge export in the README's ``python`` blocks, by name."""
    text = (REPO / "README.md").read_text()
    calls = []
    for block in re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M):
        for node in ast.walk(ast.parse(block)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in kernelforge.__all__):
                calls.append((node.func.id, node))
    return calls


def test_the_readme_examples_call_with_arguments_the_functions_take() -> None:
    calls = readme_calls()
    assert {name for name, _ in calls} >= {"get_kernel", "get_locked_kernel", "load_kernel"}
    for name, call in calls:
        args = [object() for _ in call.args]
        kwargs = {k.arg: object() for k in call.keywords if k.arg is not None}
        inspect.signature(getattr(kernelforge, name)).bind(*args, **kwargs)


def test_the_readme_names_keyword_arguments_that_exist() -> None:
    """Inline mentions such as ``LocalHub(...).publish(..., card=text)``."""
    text = (REPO / "README.md").read_text()
    mentions = re.findall(r"`(\w+)\((?:\.\.\.|[^`()]*)\)\.(\w+)\([^`]*?(\w+)=", text)
    assert ("LocalHub", "publish", "card") in mentions
    for cls, method, keyword in mentions:
        assert keyword in parameters(getattr(getattr(kernelforge, cls), method))
