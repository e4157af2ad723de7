"""The README's promise: its first two commands do all set-up and run the main job and
the tests. The demo command is run here for real; CI runs the test command."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kf_testutil import REPO

README = REPO / "README.md"


def readme_section(title: str) -> str:
    """The README's text under the heading ``### <title>``, its ``####`` subsections
    included, up to the next heading of level 2 or 3 (or the end)."""
    text = README.read_text()
    m = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^###? |\Z)", text, re.S | re.M)
    assert m, f"README.md has no section '{title}'"
    return m.group(1)


def code_blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of ``text`` whose info string is ``lang`` ("" for none)."""
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)
            if m.group(1) == lang]


def quickstart() -> tuple[list[str], str, str, list[str]]:
    """The quickstart's ``kernelforge init`` arguments, the repository Step 4 publishes
    to, Step 5's Python code, and the files Step 1's tree shows."""
    step1 = readme_section("Step 1: project structure")
    init = next(shlex.split(line, comments=True) for line in code_blocks(step1, "bash")[0]
                .splitlines() if line.startswith("kernelforge init"))
    tree: list[str] = []
    parents: list[str] = []
    for line in code_blocks(step1, "")[0].splitlines():
        m = re.match(r"^([│ ]*)[├└]── (\S+)", line)
        if m is None:
            continue
        depth = len(m.group(1)) // 4
        parents[depth:] = [m.group(2)]
        tree.append("/".join(parents))
    step4 = code_blocks(readme_section("Step 4: publish to a hub"), "bash")[0]
    publish = next(shlex.split(line, comments=True) for line in step4.splitlines()
                   if line.startswith("kernelforge publish"))
    repo = publish[publish.index("--repo") + 1]
    step5 = code_blocks(readme_section("Step 5: use it"), "python")[0]
    return init[1:], repo, step5, tree


def readme_commands() -> list[str]:
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert first_block, "README.md has no bash block"
    return [line.split("#", 1)[0].strip() for line in first_block.group(1).splitlines()
            if line.split("#", 1)[0].strip()]


def _scripts_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment variables under which the scripts find an environment already set
    up for this checkout: wrappers of the Python running the tests, with the scripts' install
    stamp. Naming that Python's own environment (``sys.prefix``) instead would have the
    scripts reinstall this checkout into it whenever its stamp names another checkout."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = shlex.quote(sys.executable)
    for name, command in (("python", python), ("kernelforge", f"{python} -m kernelforge")):
        (venv / "bin" / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (venv / "bin" / name).chmod(0o755)
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    (venv / ".kernelforge-install").write_text(f"{REPO} {digest}\n")
    path = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, KERNELFORGE_VENV=str(venv), PYTHONPATH=path, **extra)


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    assert text.index("```bash") < text.index("## "), "the commands come before any section"
    assert readme_commands() == ["./scripts/demo", "./scripts/test"]
    for command in readme_commands():
        script = REPO / command
        assert script.is_file() and os.access(script, os.X_OK), command


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    test_command = readme_commands()[1]
    assert re.search(rf"^{re.escape(test_command)}\b", ci, re.M), ci


@pytest.mark.slow
def test_demo_command_runs_the_main_job(tmp_path: Path, built_relu: Path) -> None:
    """Runs `./scripts/demo` in this Python environment with a private hub and cache.

    The cache is seeded with the session's relu build (same sources, same toolchain), so
    the build step finds it up to date instead of compiling torch's headers once more;
    compiling is covered by test_build.py. Publishing, loading and checking run for real.
    """
    cache = tmp_path / "cache"
    shutil.copytree(built_relu, cache / "kernelforge" / "demo" / "relu", symlinks=True)
    env = _scripts_env(tmp_path, KERNELFORGE_HUB=str(tmp_path / "hub"),
                       XDG_CACHE_HOME=str(cache))
    proc = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True,
                          env=env, timeout=900, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "up to date" in out
    assert "publish: kernelforge-demo/relu version 1" in out
    assert re.search(r"get_kernel\('kernelforge-demo/relu', backend='cpu'\) -> module _relu_cpu_",
                     out), out
    assert out.count("relu(x) == torch.relu(x): yes") >= 3
    assert "demo: all outputs match torch.relu" in out
    assert (tmp_path / "hub" / "kernelforge-demo" / "relu").is_dir()


def test_quickstart_calls_what_init_generates(tmp_path: Path) -> None:
    """Step 5 calls functions that the project Step 1 scaffolds defines and exports, on
    the repository Step 4 publishes, and Step 1's tree shows the files init writes."""
    from kernelforge.cli import main

    init_args, repo, code, tree = quickstart()
    assert init_args[0] == "init"
    assert len(tree) > 5, tree
    name = init_args[1]
    assert main(["init", name, str(tmp_path / name)]) == 0
    project = tmp_path / name
    for rel in tree:
        assert (project / rel).exists(), f"README's tree shows {rel}; init did not create it"
    written = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    left_out = written - set(tree)
    assert not left_out, f"README's tree leaves out files init writes: {sorted(left_out)}"

    calls = ast.parse(code)
    loads = [n for n in ast.walk(calls) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "get_kernel"]
    assert len(loads) == 1, "Step 5 loads the kernel once with get_kernel"
    var = loads[0].targets[0].id  # type: ignore[attr-defined]
    assert ast.literal_eval(loads[0].value.args[0]) == repo
    assert repo.split("/")[1] == name
    used = {n.func.attr for n in ast.walk(calls) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id == var}
    assert used, "Step 5 calls a function of the loaded kernel"

    package = ast.parse((project / "torch-ext" / name.replace("-", "_") / "__init__.py")
                        .read_text())
    defined = {n.name for n in package.body if isinstance(n, ast.FunctionDef)}
    exported = next(ast.literal_eval(n.value) for n in package.body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", "") == "__all__")
    assert used <= defined & set(exported), (used, defined, exported)


def _fake_python(path: Path, version: str) -> Path:
    """An executable that answers the scripts' version probe as Python ``version`` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = tuple(int(p) for p in version.split(".")) < (3, 10)
    path.write_text(f"#!/bin/sh\necho 'Python {version}'\nexit {int(old)}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("command", ["./scripts/demo", "./scripts/test"])
def test_the_commands_refuse_a_python_older_than_3_10(tmp_path: Path, command: str) -> None:
    """An old interpreter is named before anything is installed, and an environment made
    with one earlier is not reused in silence (fixing PYTHON alone would not help)."""
    env = dict(os.environ, PYTHON=str(_fake_python(tmp_path / "py39" / "python", "3.9")),
               KERNELFORGE_VENV=str(tmp_path / "venv"))
    proc = subprocess.run([str(REPO / command)], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "kernelforge needs Python >= 3.10, and " in proc.stderr
    assert "is Python 3.9; fix: run again with PYTHON=" in proc.stderr
    assert not (tmp_path / "venv").exists(), "nothing is set up with an old Python"

    _fake_python(tmp_path / "venv" / "bin" / "python", "3.9")
    env["PYTHON"] = sys.executable
    proc = subprocess.run([str(REPO / command)], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{tmp_path / 'venv'} holds Python 3.9" in proc.stderr
    assert f"fix: remove it (rm -rf {tmp_path / 'venv'})" in proc.stderr


def test_the_test_command_takes_paths_from_where_it_is_run(tmp_path: Path) -> None:
    """`../scripts/test test_x.py` from tests/ runs tests/test_x.py (the script itself
    runs in the repository root)."""
    # VENV, a name shells often export, is not taken for the environment
    env = _scripts_env(tmp_path, VENV="/nonexistent")
    proc = subprocess.run([str(REPO / "scripts" / "test"), "-q", "-p", "no:cacheprovider",
                           "test_digest.py", "-k", "test_sha512"],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO / "tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b1 passed\b", proc.stdout), proc.stdout
    # a test named for --deselect is named as pytest names it
    proc = subprocess.run([str(REPO / "scripts" / "test"), "-q", "-p", "no:cacheprovider",
                           "test_digest.py", "--deselect", "test_digest.py::test_sha512"],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO / "tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b1 deselected\b", proc.stdout), proc.stdout


def test_the_architecture_map_names_every_module() -> None:
    """docs/architecture.md's folder map lists every module of the package, each under
    its folder: a module added without a line there is a map that misleads."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    tree = re.search(r"^```\nsrc/kernelforge/\n(.*?)^```$", doc, re.S | re.M)
    assert tree, "docs/architecture.md has no folder map of src/kernelforge/"
    listed, folders = set(), []
    for line in tree.group(1).splitlines():
        m = re.match(r"( *)(\S+)", line)
        if not m or not m.group(2).endswith((".py", "/")):
            continue  # a description's second line
        depth = len(m.group(1)) // 2 - 1
        del folders[depth:]
        if m.group(2).endswith("/"):
            folders.append(m.group(2))
        else:
            listed.add("".join(folders) + m.group(2))
    package = REPO / "src" / "kernelforge"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")
               if "examples" not in p.relative_to(package).parts}
    assert modules - listed == set(), "modules missing from docs/architecture.md"
    assert listed - modules == set(), "docs/architecture.md names modules that do not exist"


#: What ends a file name written like a reference (``build.toml``, ``cache.py``).
_FILE_SUFFIXES = frozenset({"py", "toml", "ninja", "lock", "json"})


def _names_defined(tree: ast.Module) -> tuple[set[str], dict[str, set[str]]]:
    """The top-level names of a module (functions, classes, assignments, imports), and
    the members of each of its classes (methods, fields, class attributes)."""
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            members = classes.setdefault(node.name, set())
            for n in node.body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(n.name)
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    members.add(n.target.id)
                elif isinstance(n, ast.Assign):
                    members |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names, classes


def test_the_architecture_names_what_the_code_defines() -> None:
    """Every ``module.name`` and ``Class.member`` that docs/architecture.md cites in
    backticks (``compile.check_ninja_paths``, ``BuildPlan.path_free``) is defined there:
    a renamed or removed function leaves no reference behind that sends a reader to
    nothing. Modules are named by their file (``plan`` for build/plan.py)."""
    package = REPO / "src" / "kernelforge"
    modules: dict[str, set[str]] = {}
    classes: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        if "examples" in path.relative_to(package).parts:
            continue
        name = path.parent.name if path.name == "__init__.py" else path.stem
        names, members = _names_defined(ast.parse(path.read_text()))
        modules.setdefault(name, set()).update(names)
        for cls, found in members.items():
            classes.setdefault(cls, set()).update(found)
    doc = (REPO / "docs" / "architecture.md").read_text()
    cited = set(re.findall(r"`([A-Za-z_]\w*)\.([A-Za-z_]\w*)`", doc))
    checked, missing = 0, []
    for owner, name in sorted(cited):
        if owner in modules and name not in _FILE_SUFFIXES:
            known = modules[owner]
        elif owner in classes:
            known = classes[owner]
        else:
            continue  # not kernelforge's (sys.path, os.fork) or a file name
        checked += 1
        if name not in known:
            missing.append(f"{owner}.{name}")
    assert checked > 40, f"only {checked} references recognised: has the citation style changed?"
    assert missing == [], f"docs/architecture.md cites names the code does not define: {missing}"


@pytest.mark.parametrize("command", ["./scripts/demo", "./scripts/test"])
def test_the_commands_run_through_a_link(tmp_path: Path, command: str) -> None:
    """A link to a command (say in ~/bin) runs it: _env.sh is found beside the script the
    link leads to, through a chain of links, relative or not."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "first").symlink_to(REPO / command)
    (tmp_path / "bin" / "second").symlink_to("first")
    proc = subprocess.run(["./second", "--help"], capture_output=True, text=True,
                          env=_scripts_env(tmp_path), timeout=120, cwd=tmp_path / "bin")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage:" in proc.stdout, proc.stdout + proc.stderr


def test_a_set_up_cut_short_before_pip_is_taken_up_again(tmp_path: Path) -> None:
    """An environment whose first set-up was stopped while venv installed pip (Ctrl-C, a
    closed terminal) has a Python and no pip: the next run puts pip back and goes on,
    instead of failing with 'No module named pip' on every run after."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    (tmp_path / "wheels").mkdir()
    env = dict(os.environ, KERNELFORGE_VENV=str(venv), TORCH_SPEC="torch",
               # offline, with nothing to install from: pip must run, then fail on torch
               PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(tmp_path / "wheels"))
    proc = subprocess.run([str(REPO / "scripts" / "test"), "--version"], capture_output=True,
                          text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "No module named pip" not in proc.stderr, proc.stderr
    assert f"{venv} has no working pip (its set-up was cut short?): installing it" \
        in proc.stderr, proc.stderr
    assert "No matching distribution found for torch" in proc.stderr, proc.stderr
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"], check=True,
                   capture_output=True, timeout=120)


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_the_commands_set_up_nothing_among_other_files(tmp_path: Path, kind: str) -> None:
    """KERNELFORGE_VENV naming a folder of other things (a parent folder, the project
    itself) or a file is refused with the fix, and nothing is written there."""
    target = tmp_path / "mine"
    if kind == "folder":
        target.mkdir()
        (target / "notes.txt").write_text("mine\n")
    else:
        target.write_text("mine\n")
    env = dict(os.environ, KERNELFORGE_VENV=str(target), PIP_CONFIG_FILE=os.devnull,
               PIP_NO_INDEX="1")
    proc = subprocess.run([str(REPO / "scripts" / "test"), "--version"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"error: {target} is not a virtual environment, and it is not an empty folder" \
        in proc.stderr, proc.stderr
    assert "fix: set KERNELFORGE_VENV to a folder that does not exist yet" in proc.stderr
    if kind == "folder":
        assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    else:
        assert target.read_text() == "mine\n"


@pytest.mark.parametrize("blank", [" ", " \t "])
def test_a_blank_kernelforge_venv_counts_as_unset(tmp_path: Path, blank: str) -> None:
    """KERNELFORGE_VENV set to blanks (a variable cleared with spaces, a template left
    unfilled) is the repository's .venv, as an empty one is and as KERNELFORGE_HUB,
    KERNELFORGE_CACHE and KERNELFORGE_CONFIG read them; before, it was taken for a
    relative path and an environment was set up in a folder named by blanks. The
    scripts run here from a copy of the repository, whose .venv is set up already."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("scripts/_env.sh", "scripts/test", "pyproject.toml"):
        shutil.copy2(REPO / name, repo / name)
    env = _scripts_env(tmp_path,
                       # a run that missed .venv fails here, before it sets anything up
                       PYTHON=str(_fake_python(tmp_path / "py39" / "python", "3.9")))
    env["KERNELFORGE_VENV"] = blank
    (tmp_path / "venv").rename(repo / ".venv")
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()
    (repo / ".venv" / ".kernelforge-install").write_text(f"{repo} {digest}\n")
    caller = tmp_path / "caller"
    caller.mkdir()
    proc = subprocess.run([str(repo / "scripts" / "test"), "--version"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=caller)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("pytest "), proc.stdout + proc.stderr
    assert list(caller.iterdir()) == [], "no folder is made for a blank KERNELFORGE_VENV"


@pytest.mark.skipif(shutil.which("flock") is None, reason="no flock(1) here")
def test_a_second_run_waits_for_a_set_up_under_way(tmp_path: Path) -> None:
    """Two first runs at once (two terminals, an editor's test runner) do not set up one
    environment together: the second waits for the first's set-up, says so, then goes
    on with what it made."""
    import fcntl

    env = _scripts_env(tmp_path)
    fd = os.open(env["KERNELFORGE_VENV"], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a set-up under way holds it
        proc = subprocess.Popen([str(REPO / "scripts" / "test"), "--version"], env=env,
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line == f"waiting for another run that is setting up {env['KERNELFORGE_VENV']}\n"
        assert proc.poll() is None, "the second run goes on only when the first is done"
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert out.startswith("pytest "), out + err


def test_an_environment_whose_python_is_gone_is_named_with_the_fix(tmp_path: Path) -> None:
    """An environment whose Python was removed (an upgrade took the old version away)
    is named as such with the fix, rather than 'set up' again over its dangling link,
    which venv leaves as it is, and then said to have no pip."""
    env = _scripts_env(tmp_path, PYTHON=sys.executable, PIP_CONFIG_FILE=os.devnull,
                       PIP_NO_INDEX="1")
    venv = Path(env["KERNELFORGE_VENV"])
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(tmp_path / "gone" / "python3.9")
    (venv / "pyvenv.cfg").write_text(f"home = {tmp_path / 'gone'}\n")
    proc = subprocess.run([str(REPO / "scripts" / "test"), "--version"], capture_output=True,
                          text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"error: {venv} holds a Python that does not run (removed or upgraded away?)" \
        in proc.stderr, proc.stderr
    assert f"fix: remove it (rm -rf {venv}) and run again" in proc.stderr, proc.stderr
    assert "setting up" not in proc.stderr, proc.stderr


#: ``pip install`` of the name ``kernelforge`` (``-U kernelforge``, ``'kernelforge[hf]'``):
#: the package of that name on PyPI is another project, so the command fetches it in place
#: of this one, which is installed from its checkout.
_PIP_INSTALL_BY_NAME = re.compile(r"pip install(?:\s+-[-\w]+)*\s+[\"']?kernelforge\b")


def _joined(text: str) -> str:
    """``text`` with its runs of white space one space, and Python's string literals that
    continue on the next line joined to it (``"pip install -U "`` then ``"kernelforge"``)."""
    return " ".join(re.sub(r"[\"']\s*\n\s*[rf]?[\"']", "", text).split())


def test_nothing_says_to_install_kernelforge_by_its_name() -> None:
    """The README, the documents, the scripts and every message of the package name the
    install the README gives (``pip install -e .`` in the checkout), never ``pip install
    -U kernelforge``: that fetches another project from PyPI and replaces this one. The
    upgrade the newer-format errors name is the README's install."""
    from kernelforge._parse import UPGRADE

    files = [README, *(REPO / "docs").glob("*.md"), *(REPO / "scripts").iterdir(),
             *(REPO / "src" / "kernelforge").rglob("*.py"),
             *(REPO / "src" / "kernelforge" / "examples").rglob("*.md")]
    found = [f"{path.relative_to(REPO)}: {m.group(0)}" for path in files if path.is_file()
             for m in _PIP_INSTALL_BY_NAME.finditer(_joined(path.read_text()))]
    assert found == [], found
    assert "install this checkout into it with `pip install -e .`" in README.read_text()
    assert "pip install -e . there again" in UPGRADE, UPGRADE
    upgrade = " ".join(readme_section("Several kernelforge versions on one machine").split())
    assert "then `pip install -e .` there again" in upgrade, upgrade
