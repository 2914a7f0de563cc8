"""The fenced code blocks of the docs (``docs/**/*.md``) and the README, with what marks them.

A block a user would run is either an *example*, between ``<!-- example:NAME -->`` and
``<!-- /example -->``: a ``python`` or ``bash`` block, then the ``text`` block of what it
prints, which a test checks; or it is preceded by ``<!-- not-run: REASON -->``. Output blocks
are ``text``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support.common import ROOT

#: the languages of blocks that a user would run
RUNNABLE = {"python", "py", "bash", "sh", "shell", "console", ""}
#: the languages of blocks that are read, not run (outputs, file contents)
READ_ONLY = {"text", "toml", "json", "yaml"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<language>[\w+-]*)\s*$")
EXAMPLE_START = re.compile(r"^<!-- example:(?P<name>[\w-]+) -->$")
EXAMPLE_END = "<!-- /example -->"
NOT_RUN = re.compile(r"^ *<!-- not-run: (?P<reason>.*\S) -->$")


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    #: the example it belongs to, if any
    example: str | None
    #: the reason given by a not-run marker just before it, if any
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass
class Example:
    name: str
    where: str
    language: str
    code: str
    printed: str


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order. Raises on an unclosed fence or an
    unclosed example, which would hide blocks from the checks."""
    lines = path.read_text().split("\n")
    found: list[Block] = []
    example: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        start = EXAMPLE_START.match(line)
        if start:
            if example is not None:
                raise AssertionError(f"{path}:{i + 1}: example {example} is not closed")
            example = start.group("name")
        elif line == EXAMPLE_END:
            example = None
        fence = FENCE.match(line)
        if fence:
            close = fence.group("indent") + fence.group("fence")
            end = i + 1
            while end < len(lines) and lines[end].rstrip() != close:
                end += 1
            if end == len(lines):
                raise AssertionError(f"{path}:{i + 1}: the code block is not closed")
            marker = NOT_RUN.match(lines[i - 1]) if i > 0 else None
            indent = len(fence.group("indent"))
            code = "\n".join(text[indent:] for text in lines[i + 1 : end]) + "\n"
            found.append(
                Block(
                    path,
                    i + 1,
                    fence.group("language"),
                    code,
                    example,
                    marker.group("reason") if marker else None,
                )
            )
            i = end
        i += 1
    if example is not None:
        raise AssertionError(f"{path}: example {example} is not closed")
    return found


def examples() -> list[Example]:
    """Every example: its code block and the output block after it."""
    found = []
    for path in documents():
        by_name: dict[str, list[Block]] = {}
        for block in blocks(path):
            if block.example:
                by_name.setdefault(block.example, []).append(block)
        for name, (code, *rest) in by_name.items():
            printed = [block for block in rest if block.language == "text"]
            if code.language not in ("python", "bash") or len(printed) != 1 or len(rest) != 1:
                raise AssertionError(
                    f"{code.where}: example {name} must be one python or bash block and the "
                    "text block of what it prints"
                )
            found.append(Example(name, code.where, code.language, code.code, printed[0].code))
    return found


#: a step of a multi-host walkthrough: the next block runs on this host (``prints``: the next
#: block is what the last step prints)
WALKTHROUGH_STEP = re.compile(r"^<!-- walkthrough:(?P<host>[\w-]+) -->$")


@dataclass
class Walkthrough:
    """The steps of a page's walkthrough, in order: (host, bash code); what the last prints."""

    steps: list[tuple[str, str]]
    printed: str


def walkthrough(path: Path) -> Walkthrough:
    """The walkthrough of ``path``: each block after a ``<!-- walkthrough:HOST -->`` line
    (the line before it is the block's not-run marker) is a step on HOST; the block after
    ``<!-- walkthrough:prints -->`` is what the last step prints."""
    lines = path.read_text().split("\n")
    marked = {
        i + 2: match.group("host")  # the fence comes after the step's line and the not-run line
        for i, line in enumerate(lines)
        if (match := WALKTHROUGH_STEP.match(line)) and match.group("host") != "prints"
    }
    marked.update(
        {i + 1: "prints" for i, line in enumerate(lines) if line == "<!-- walkthrough:prints -->"}
    )
    steps, printed = [], ""
    for block in blocks(path):
        host = marked.get(block.line - 1)
        if host == "prints":
            printed = block.code
        elif host is not None:
            steps.append((host, block.code))
    if not steps or not printed or len(steps) + 1 != len(marked):
        raise AssertionError(f"{path}: a walkthrough's steps and what it prints are not found")
    return Walkthrough(steps, printed)


def printed_pattern(printed: str) -> re.Pattern:
    """What an example must print: the output block as it is, where ``...`` stands for any text
    within a line."""
    parts = [re.escape(part) for part in printed.rstrip("\n").split("...")]
    return re.compile(r"[^\n]*?".join(parts))


#: what running text hides from a reader's words, in the order tried at each place: inline
#: code, a Markdown link (its text, then its target), an HTML tag or comment, a bare URL, an
#: attribute list (``{ #id }``)
_NOT_WORDS = re.compile(
    r"(?P<code>(`+)(?:(?!\n[ \t]*\n).)*?\2)"
    r"|\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<target>[^()\s]+)(?:\s+\"[^\"]*\")?\)"
    r"|<!--.*?-->|</?[A-Za-z][^>]*>"
    r"|https?://\S+"
    r"|\{:?\s*[#.][^}]*\}",
    re.DOTALL,
)
HEADING = re.compile(r"^ {0,3}#{1,6}\s")


@dataclass
class Link:
    start: int  # offset in the page's text
    text: str
    target: str


@dataclass
class Prose:
    """A page's running text, offsets kept (a blanked character is a blank, a line end stays):
    ``plain`` is the page without fenced blocks, headings and HTML comments; ``words`` is
    ``plain`` without inline code, links, HTML tags and URLs either, so a match in it is a word
    a reader reads in a sentence; ``links`` are the links that ``words`` blanked out."""

    path: Path
    text: str
    plain: str
    words: str
    links: list[Link]

    def line(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def prose(path: Path) -> Prose:
    """The running text of a Markdown page and its links (see ``Prose``)."""
    text = path.read_text()
    lines = text.split("\n")
    fenced = {n for block in blocks(path) for n in range(block.line - 1, _block_end(lines, block))}
    kept = [
        _blank(line) if n in fenced or HEADING.match(line) else line for n, line in enumerate(lines)
    ]
    plain = re.sub(r"<!--.*?-->", lambda found: _blank(found[0]), "\n".join(kept), flags=re.DOTALL)
    links = [
        Link(found.start(), found["text"], found["target"])
        for found in _NOT_WORDS.finditer(plain)
        if found["target"] is not None
    ]
    words = _NOT_WORDS.sub(lambda found: _blank(found[0]), plain)
    return Prose(path, text, plain, words, links)


def _block_end(lines: list[str], block: Block) -> int:
    """The index after the closing fence of ``block`` (``blocks`` found it closed)."""
    opening = FENCE.match(lines[block.line - 1])
    assert opening
    close = opening["indent"] + opening["fence"]
    end = block.line
    while lines[end].rstrip() != close:
        end += 1
    return end + 1
