"""The documentation's ``kernelforge`` command lines are ones the command takes, and
README.md's command table names every command and option it has.

Each line is read by the command's own parser (:func:`kernelforge.cli.parse_args`, what
``main`` reads a command line with) and never run. A renamed or removed option fails
here, also where argparse would take the old name as an abbreviation of the new one
(``--older-than`` of a ``--older-than-days``): options are compared by their full name.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kf_testutil import REPO

from kernelforge.cli import build_parser, parse_args

#: The documents whose command lines are checked.
DOCS = ("README.md", "docs/architecture.md", "benchmarks/README.md", "kernels/gemm/README.md")

#: A value for each placeholder of the command table's syntax (``ORG/NAME``, ``[PATH]``),
#: one the argument's type accepts.
SAMPLES = {
    "ORG/NAME": "my-org/my-relu", "REPO": "my-org/my-relu", "NAME": "my-relu",
    "DIR": "my-relu", "PATH": "my-relu", "PROJECT": "my-relu", "FILE": "README.md",
    "COMMIT": "3f2a9c1", "KEY": "default", "KEY_ID": "0123abcd", "MESSAGE": "first",
    "PATTERN": "my-org/*", "DAYS": "30", "N": "4",
    "IDENTITY": "https://github.com/my-org/my-relu/.github/workflows/build.yaml@refs/heads/main",
}
#: Values the documentation elides with "...", given a sample of their form.
ELIDED = {"ed25519:...": "ed25519:" + "A" * 43 + "="}  # 32 bytes of base64
#: Command lines the documentation shows as refused (bad usage in README.md): each must
#: be a usage error, and none is checked as a command line the command takes.
REFUSED = {"init Bad_Name", "kernelforge download ''"}
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(/[A-Z][A-Z0-9_]*)?")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
SHELL = ("", "bash", "sh", "shell", "console")
#: argparse's complaints about an operand left out, and the command's own about a
#: subcommand left out: what a mention of a command in the text (``kernelforge info
#: --lock``, ``kernelforge cache``) may leave out, where a command line may not.
MISSING = re.compile(r"the following arguments are required: |argument \S+: expected one "
                     r"argument$|: error: no (command|action) given: ")


@dataclass(frozen=True)
class Line:
    """A command line of a document: ``words`` after ``kernelforge``, placeholders given
    sample values; ``mention`` for an inline code span, which may leave operands out."""

    doc: str
    text: str
    words: tuple[str, ...]
    mention: bool

    def __str__(self) -> str:
        return f"{self.doc}: {self.text}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}


def commands(parser: argparse.ArgumentParser | None = None,
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                           argparse.ArgumentParser]]:
    """Every (sub)command of the parser, as ``(("cache", "list"), its parser)``."""
    parser = parser or build_parser()
    for name, sub in _subcommands(parser).items():
        yield (*path, name), sub
        yield from commands(sub, (*path, name))


TOP = set(_subcommands(build_parser()))


def _words(text: str) -> tuple[str, ...] | None:
    """The words of a documented command line after ``kernelforge``, with the command
    table's syntax read: ``[optional]`` parts given, placeholders given sample values.
    None for a line of alternatives (``list|remove``), which names several commands."""
    if "|" in text:
        return None
    words = shlex.split(re.sub(r"[\[\]]", "", text), comments=True)
    if words[:1] == ["kernelforge"]:
        words = words[1:]
    unknown = [w for w in words if PLACEHOLDER.fullmatch(w) and w not in SAMPLES]
    assert not unknown, f"{text}: add a sample value for {unknown} to SAMPLES"
    return tuple(ELIDED.get(w, SAMPLES.get(w, w)) for w in words)


def _spans(text: str) -> Iterator[str]:
    """The inline code spans of ``text`` outside fenced blocks, on one line each (a span
    may wrap), with a table's ``\\|`` read as ``|``."""
    for m in re.finditer(r"`([^`]+)`", FENCE.sub("", text)):
        yield " ".join(m.group(1).replace("\\|", "|").split())


def documented_lines() -> list[Line]:
    """The ``kernelforge`` command lines of :data:`DOCS`: each line of a shell block that
    starts with ``kernelforge`` (continuation lines joined), and each code span that is
    one, with or without its ``kernelforge`` (``publish --sign KEY``)."""
    lines = []
    for doc in DOCS:
        text = (REPO / doc).read_text()
        for block in FENCE.finditer(text):
            if block.group(1) not in SHELL:
                continue
            for row in block.group(2).replace("\\\n", " ").splitlines():
                row = row.strip().removeprefix("$ ")
                words = _words(row) if row.startswith("kernelforge ") else None
                if words is not None:
                    lines.append(Line(doc, row, words, mention=False))
        for span in _spans(text):
            if ": error:" in span:  # an error line the command prints, not a command line
                continue
            if len(span.split()) > 1 and span.split()[0] in TOP | {"kernelforge"}:
                words = _words(span)
                if words is not None:
                    lines.append(Line(doc, span, words, mention=True))
    return lines


def unknown_options(words: tuple[str, ...]) -> list[str]:
    """The options among ``words`` that the (sub)command they name does not have, by
    full name (argparse would take a prefix of a longer option)."""
    parser = build_parser()
    unknown = []
    for word in words:
        sub = _subcommands(parser)
        if word in sub:
            parser = sub[word]
        elif re.match(r"-[A-Za-z-]", word):
            name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            if name not in _options(parser):
                unknown.append(word)
    return unknown


def usage_error(words: tuple[str, ...]) -> str | None:
    """What the command says of ``words`` when it does not take them (argparse's last
    line), else None; nothing is run."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parse_args(list(words))
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() \
                else "exited (--help or --version)"
    return None


def problems(line: Line) -> list[str]:
    """What is wrong with a documented command line: options the command lacks, and for
    a command line (not a mention) any usage error."""
    found = [f"no option {w}" for w in unknown_options(line.words)]
    error = usage_error(line.words)
    if error is not None and not (line.mention and MISSING.search(error)):
        found.append(error)
    return found


LINES = documented_lines()


def test_every_document_has_command_lines() -> None:
    """The collection finds what is there: every document shows commands, and the README
    both blocks and spans (a collector that found nothing would pass everything)."""
    assert {line.doc for line in LINES} == set(DOCS)
    readme = [line for line in LINES if line.doc == "README.md"]
    assert sum(not line.mention for line in readme) >= 15, readme
    assert sum(line.mention for line in readme) >= 40, readme
    assert any(line.words[:2] == ("cache", "clear") for line in readme)


@pytest.mark.parametrize("line", [line for line in LINES if line.text not in REFUSED], ids=str)
def test_documented_command_line_is_taken(line: Line) -> None:
    assert problems(line) == [], str(line)


def test_documented_refusals_are_refused() -> None:
    """What the documentation shows as bad usage is: each such line is found, and the
    command refuses it."""
    shown = {line.text: line for line in LINES if line.text in REFUSED}
    assert set(shown) == REFUSED, f"no longer in the documentation: {REFUSED - set(shown)}"
    for line in shown.values():
        assert usage_error(line.words) is not None, f"{line}: taken, documented as refused"


@pytest.mark.parametrize(("text", "mention", "expected"), [
    ("kernelforge cache clear --older-then 30", False, "no option --older-then"),
    # argparse takes the prefix; a renamed --all-variants would still parse
    ("kernelforge download --all", False, "no option --all"),
    ("kernelforge keygen --no-trust --force", False, None),
    ("kernelforge build --arch sm_90", False, "argument --arch: "),
    ("kernelforge info ORG/NAME --version 1 --lock FILE", False, "not allowed with argument"),
    ("kernelforge info --lock", True, None),  # a mention: the operands are left out
    ("kernelforge info --lock", False, "argument --lock: expected one argument"),
    ("kernelforge info", False, "the following arguments are required: repo"),
    ("kernelforge info --lokc", True, "no option --lokc"),
    ("publish --sign", True, None),
])
def test_the_check_refuses_what_the_command_refuses(text: str, mention: bool,
                                                    expected: str | None) -> None:
    words = _words(text)
    assert words is not None
    found = problems(Line("doc", text, words, mention))
    if expected is None:
        assert found == []
    else:
        assert any(expected in problem for problem in found), found


@dataclass(frozen=True)
class Row:
    """A row of README.md's command table: the command words of its first column
    (``cache``, ``list``, ...) and the options its code spans name."""

    text: str
    words: frozenset[str]
    options: frozenset[str]


def _named_command(span: str) -> str | None:
    """The command a code span starts with (``kernelforge publish ...``, ``publish -m``)."""
    words = span.split()
    words = words[1:] if words[:1] == ["kernelforge"] else words
    return words[0] if words and words[0] in TOP else None


def command_table() -> list[Row]:
    readme = (REPO / "README.md").read_text()
    section = re.search(r"^## The command line\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    assert section, "README.md has no section '## The command line'"
    rows = []
    for text in re.findall(r"^\| `.*", section.group(1), re.M):
        cells = re.split(r"(?<!\\)\|", text)
        words = {w for span in _spans(cells[1])
                 for w in re.split(r"[\s|]+", re.sub(r"[\[\]]", "", span))
                 if re.fullmatch(r"[a-z][a-z-]*", w) and w != "kernelforge"}
        # an option of another command (`publish -m`) is checked as a command line is
        options = {m.group(1) for span in _spans(text)
                   if _named_command(span) in (None, *words)
                   for m in re.finditer(r"(?<![\w-])(--?[a-z][a-z-]*)", span)}
        rows.append(Row(text, frozenset(words), frozenset(options)))
    assert len(rows) >= len(TOP) // 2, rows
    return rows


def test_the_command_table_names_every_command() -> None:
    """Each command has one row, which names its subcommands too (``cache list``), and
    each command word of a row is one the parser has."""
    rows = command_table()
    for path, _parser in commands():
        holding = [row for row in rows if path[0] in row.words]
        assert len(holding) == 1, f"kernelforge {path[0]}: {len(holding)} rows of the " \
                                  "command table name it; expected one"
        assert set(path) <= holding[0].words, \
            f"the command table's row for {path[0]} does not name kernelforge {' '.join(path)}"
    for row in rows:
        named = {path[-1] for path, _ in commands() if path[0] in row.words}
        assert row.words <= named, f"{row.text}: no such command {sorted(row.words - named)}"


def test_the_command_table_names_every_option() -> None:
    """Each option of a command, its short spelling too (``-j``), is named in its row,
    and each option a row names is one of its commands' (a renamed option fails here
    too, where no command line of the documentation uses it)."""
    rows = command_table()
    for row in rows:
        parsers = [p for path, p in commands() if path[0] in row.words]
        known = set().union(*(_options(p) for p in parsers))
        assert row.options <= known, f"{row.text}: no option {sorted(row.options - known)}"
        for path, parser in commands():
            if path[0] in row.words:
                missing = _options(parser) - row.options
                assert not missing, (f"the command table's row for {path[0]} does not name "
                                     f"the options of kernelforge {' '.join(path)}: "
                                     f"{sorted(missing)}")


def test_the_variables_the_help_names_are_documented() -> None:
    """Each environment variable a command's ``--help`` names as a default (``-j``'s
    ``$MAX_JOBS``, ``--hub``'s ``$KERNELFORGE_HUB``) is named in README.md, so that a
    default the help gives is one the README gives too."""
    readme = (REPO / "README.md").read_text()
    named: dict[str, set[str]] = {}
    for path, parser in commands():
        for action in parser._actions:
            for variable in re.findall(r"\$([A-Z][A-Z0-9_]+)", action.help or ""):
                named.setdefault(variable, set()).add(" ".join(path))
    assert {"MAX_JOBS", "KERNELFORGE_HUB", "KERNELFORGE_CACHE"} <= set(named), named
    missing = {v: sorted(where) for v, where in named.items()
               if not re.search(rf"`\$?{v}\b", readme)}
    assert missing == {}, f"README.md does not name these variables of the help: {missing}"


def test_the_issuer_a_sigstore_identity_takes_by_default_is_the_readmes() -> None:
    """``trust add-sigstore`` without ``--issuer`` trusts the identity under GitHub
    Actions' issuer (the trust store's own default too), and README.md names that
    issuer as the default: a change of either shows here."""
    from kernelforge.trust import GITHUB_ISSUER

    parser = dict(commands())[("trust", "add-sigstore")]
    issuer = next(a for a in parser._actions if "--issuer" in a.option_strings)
    assert issuer.default == GITHUB_ISSUER
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (f"`--issuer` names it, GitHub Actions' (`{GITHUB_ISSUER}`) by default"
            in readme)
