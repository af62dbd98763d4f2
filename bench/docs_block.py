"""Generated blocks in the docs: a bench script's table between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``."""

from __future__ import annotations

from pathlib import Path


def replace_block(path: Path, name: str, block: str) -> None:
    """Put ``block`` between ``path``'s ``name`` markers, keeping the rest of the file; a file or markers not there
    yet are added (a new file gets a ``# Results`` title)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.is_file() else f"# Results\n\n{begin}\n{end}\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{block}\n{end}{tail}")
