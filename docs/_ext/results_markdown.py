"""Read the markdown results pages of ``docs/results/`` without a markdown parser.

The pages have one fixed layout (``benchmarks/results_page.py``): ``#`` headings, paragraphs,
``-`` lists, pipe tables and fenced code. Where MyST (``myst_parser``) is installed, ``conf.py``
uses it instead; otherwise this extension turns such a page into reStructuredText when Sphinx
reads it.
"""

import re
from pathlib import Path

_ADORN = {1: "=", 2: "-", 3: "~", 4: "^"}
_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _guard(text: str) -> str:
    """Separate inline markup from adjacent word characters, as reST requires."""
    text = re.sub(r"(?<=\w)(``|\*\*|`)(?=\S)", r"\\ \1", text)
    return text


def _plain(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = re.sub(r"(?<!\*)\*(?!\*)", r"\\*", text)
    text = re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", text)
    text = _LINK.sub(lambda m: f"`{m.group(1)} <{m.group(2)}>`__", text)
    text = _BOLD.sub(lambda m: f"**{m.group(1)}**", text)
    return text


def inline(text: str) -> str:
    out, end = [], 0
    for m in _CODE.finditer(text):
        out.append(_plain(text[end:m.start()]))
        out.append(f"``{m.group(2).strip()}``")
        end = m.end()
    out.append(_plain(text[end:]))
    s = "".join(out)
    # end-strings followed by a word character
    s = re.sub(r"(``|\*\*)(?=\w)", lambda m: m.group(1) + "\\ ", s)
    s = re.sub(r"(?<=[\w)])(``|\*\*)(?=[^\s\\]+(``|\*\*))", r"\\ \1", s)
    return s


def _cells(line: str):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_rst(md: str) -> str:
    lines, out, i = md.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            out += ["::", ""]
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append("   " + lines[i])
                i += 1
            out.append("")
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            title = inline(line[level:].strip())
            out += [title, _ADORN[level] * max(len(title), 4), ""]
        elif line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            rows = [_cells(line)]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out += [".. list-table::", "   :header-rows: 1", ""]
            for row in rows:
                for k, cell in enumerate(row):
                    text = inline(cell) if cell else ""
                    out.append(("   * - " if k == 0 else "     - ") + text)
            out.append("")
            continue
        else:
            out.append(inline(line) if line.strip() else "")
        i += 1
    return "\n".join(out) + "\n"


def _read(app, docname, source):
    path = Path(app.srcdir) / f"{docname}.md"
    if path.is_file():
        source[0] = markdown_to_rst(source[0])


def setup(app):
    app.add_source_suffix(".md", "restructuredtext", override=True)
    app.connect("source-read", _read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
