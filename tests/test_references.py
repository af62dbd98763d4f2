"""Every reference in the code and the docs resolves: spec sections, paths and markdown links (issue 39).

Scanned: ``*.py``, ``*.md``, ``*.yaml``, ``*.yml``, ``*.toml`` and ``*.sh`` files under src/, envs/, agents/,
bench/, scripts/, tests/, docs/, examples/ and configs/, plus README.md and pyproject.toml; virtual environments,
build output and caches are skipped, and so is this file (it spells the patterns out).

The rules, all read from the repository root (located from this file):

1. **Section references.** A section sign followed by a number (1, 1.3, 4.2.1) belongs to the nearest ``.md``
   path before it on its line. When the sign begins its line (after indentation and comment, list or quote
   markers), alone or as a chain such as "S1.3, S1.5" (S standing for the sign), it belongs to a ``.md`` path
   that ends the previous line. That path must name a file of the repository with a markdown heading carrying
   that number (``### 1.3 Invalid actions``; headings inside fenced code do not count). A section sign that
   belongs to no path is allowed only in docs/spec/, where it means the file itself, and must then be a heading
   of that file. Paper sections are written "Section 4", equations "Eq. 3": those are not checked.
2. **The old spec files are gone.** No bare ``algorithms.md``, ``environments.md``, ``models.md``, ``peers.md``
   or ``layout.md`` (a name without a folder; markdown link targets and quoted string literals aside), and no path
   into ``shared/docs/``: the specification is docs/spec/, the CPU threading trap src/agentrl/hardware.py.
3. **Paths.** Every ``docs/...md`` and ``scripts/...py`` path mentioned exists.
4. **Links.** Every relative markdown link ``[text](target)`` in README.md and docs/ points to an existing file
   (relative to the linking file), and a ``#fragment`` into a markdown file names one of its headings (GitHub's
   anchor rule).

``python /tmp/rewrite_refs.py`` (kept by the documentation lead) rewrites the old forms into these.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCAN_DIRS = ("src", "envs", "agents", "bench", "scripts", "tests", "docs", "examples", "configs")
SCAN_ROOT_FILES = ("README.md", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh"}
SKIP_DIRS = {".venv", "venv", ".git", "build", "dist", "__pycache__", "node_modules", "runs", ".pytest_cache",
             ".hypothesis"}
SPEC_DIR = "docs/spec/"
OLD_SPEC_NAMES = ("algorithms", "environments", "models", "peers", "layout")

SIGN = "\N{SECTION SIGN}"
SECTION_RE = re.compile(SIGN + r"(\d+(?:\.\d+)*)")
MD_TOKEN_RE = re.compile(r"[\w./-]*[\w-]\.md\b")
LINE_LEAD_CHARS = " \t#*/>-(`\"'"
CHAIN_TAIL_RE = re.compile("(?:" + SIGN + r"\d+(?:\.\d+)*(?:[ \t]*(?:,|;|–|—|-|and|or|&)[ \t]*|[ \t]+))+$")
HEADING_RE = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
NUMBERED_RE = re.compile(r"(?:" + SIGN + r"[ \t]*)?(\d+(?:\.\d+)*)\.?(?=[ \t]|$)")
OLD_NAME_RE = re.compile(r"(?<![\w/.\-\[])(?:" + "|".join(OLD_SPEC_NAMES) + r")\.md(?![\w/])")
PATH_RE = re.compile(r"(?<![\w/.\-])(?:docs/[\w./-]+\.md|scripts/[\w./-]+\.py)")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCAN_ROOT_FILES if (ROOT / name).is_file()]
    for top in SCAN_DIRS:
        for dirpath, dirnames, filenames in os.walk(ROOT / top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
            files += [Path(dirpath) / f for f in sorted(filenames) if Path(f).suffix in SUFFIXES]
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def headings_outside_code(text: str) -> list[str]:
    out, fence = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            marker = stripped[:3]
            fence = None if fence == marker else (fence or marker)
            continue
        if fence is None and (m := HEADING_RE.match(line)):
            out.append(m.group(2))
    return out


@cache
def section_numbers(path: Path) -> frozenset[str]:
    text = text_of(path) if path.is_file() else None
    if text is None:
        return frozenset()
    return frozenset(m.group(1) for title in headings_outside_code(text) if (m := NUMBERED_RE.match(title)))


def github_anchor(title: str) -> str:
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for title in headings_outside_code(text_of(path) or ""):
        slug = github_anchor(title)
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return frozenset(out)


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def governing_path(text: str, pos: int) -> str | None:
    line_start = text.rfind("\n", 0, pos) + 1
    before = text[line_start:pos]
    tokens = MD_TOKEN_RE.findall(before)
    if tokens:
        return tokens[-1]
    lead = CHAIN_TAIL_RE.sub("", before)
    if lead.strip(LINE_LEAD_CHARS) == "" and line_start > 0:
        prev = text[text.rfind("\n", 0, line_start - 1) + 1:line_start - 1]
        m = re.search(r"([\w./-]*[\w-]\.md)`?[ \t(,:;]*$", prev)
        if m:
            return m.group(1)
    return None


def section_problems(name: str, text: str) -> list[str]:
    problems = []
    for m in SECTION_RE.finditer(text):
        number, where = m.group(1), f"{name}:{line_of(text, m.start())}"
        path = governing_path(text, m.start())
        if path is None:
            if not name.startswith(SPEC_DIR):
                problems.append(f"{where}: {SIGN}{number} names no file (write the path before it on its line)")
            elif number not in section_numbers(ROOT / name):
                problems.append(f"{where}: {SIGN}{number} is no heading of this file")
        elif not (ROOT / path).is_file():
            problems.append(f"{where}: {path} {SIGN}{number}: no such file {path}")
        elif number not in section_numbers(ROOT / path):
            problems.append(f"{where}: {path} {SIGN}{number}: {path} has no heading numbered {number}")
    return problems


def old_name_problems(name: str, text: str) -> list[str]:
    problems = []
    for m in OLD_NAME_RE.finditer(text):
        quote = text[m.start() - 1:m.start()]
        if quote and quote in "\"'" and text[m.end():m.end() + 1] == quote:
            continue  # a string literal holding just the file name: code, not a reference
        if text[max(0, m.start() - 2):m.start()] != "](":
            problems.append(f"{name}:{line_of(text, m.start())}: {m.group()} is not in the repository "
                            f"(the specification is {SPEC_DIR}, the CPU threading trap src/agentrl/hardware.py)")
    for m in re.finditer(r"shared/docs/[\w./-]*", text):
        problems.append(f"{name}:{line_of(text, m.start())}: {m.group()} points outside the repository")
    return problems


def path_problems(name: str, text: str) -> list[str]:
    return [f"{name}:{line_of(text, m.start())}: {m.group()} does not exist"
            for m in PATH_RE.finditer(text) if not (ROOT / m.group()).exists()]


def link_problems(path: Path, text: str) -> list[str]:
    problems = []
    for m in LINK_RE.finditer(text):
        target = m.group(1).strip("<>")
        if re.match(r"[a-zA-Z][\w+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{rel(path)}:{line_of(text, m.start())}"
        if not dest.exists():
            problems.append(f"{where}: link to a missing file: {target}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{where}: {dest.name} has no heading with the anchor #{fragment}")
    return problems


def test_references_resolve():
    files = scanned_files()
    assert len(files) > 50, f"only {len(files)} files found under {ROOT}: the scan is broken"
    problems = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        name = rel(path)
        problems += section_problems(name, text)
        problems += old_name_problems(name, text)
        problems += path_problems(name, text)
        if path.suffix == ".md" and (name == "README.md" or name.startswith("docs/")):
            problems += link_problems(path, text)
    assert not problems, f"{len(problems)} dangling reference(s):\n" + "\n".join(problems)


def test_the_rules_catch_what_they_should():
    """The checks themselves, on made-up text (so a broken regex cannot pass silently)."""
    spec = "docs/spec/algorithms.md"
    assert section_problems("src/x.py", f"see {spec} {SIGN}1.3 and {SIGN}1.5") == []
    assert section_problems("src/x.py", f"(see {spec}\n{SIGN}1.3, {SIGN}1.5)") == []
    assert len(section_problems("src/x.py", f"see {spec} {SIGN}99.1")) == 1
    assert len(section_problems("src/x.py", f"a bare ({SIGN}1.3)")) == 1
    assert len(section_problems("src/x.py", f"docs/nowhere.md {SIGN}1")) == 1
    assert old_name_problems("src/x.py", 'ROOT / "docs" / "algorithms.md"') == []
    assert len(old_name_problems("src/x.py", '"""algorithms.md, verbatim."""')) == 1
    assert len(old_name_problems("src/x.py", "(algorithms.md)")) == 1
    assert len(old_name_problems("src/x.py", "see ../shared/docs/models.md")) == 1
    assert len(path_problems("src/x.py", "docs/no-such-doc.md")) == 1
    assert github_anchor("ALFWorld from the default policy") == "alfworld-from-the-default-policy"
    assert github_anchor("What a run records: `groups.jsonl`") == "what-a-run-records-groupsjsonl"
