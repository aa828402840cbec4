"""Build-time helpers of distir's documentation site: MkDocs hooks (``hooks:`` in
mkdocs.yml) and a Griffe extension (``extensions:`` of mkdocstrings' Python handler).

What they do, all offline and in one pass over the pages:

- ``<!-- distir:ir MODULE -->`` in a page becomes the reference of one dialect (a module
  of ``distir.dialects``): its module docstring, then every type, attribute and op it
  registers, each under its IR name with its docstring.
- ``<!-- distir:passes -->`` becomes the reference of every pass in
  ``distir.passes.registry.ALL_PASSES`` (grouped by the folder that defines it), with its
  options and defaults (as ``distir-opt --list-passes`` prints them) and its docstrings,
  plus xDSL's ``canonicalize`` with distir's patterns.
- ``<!-- distir:file PATH -->`` becomes the Markdown file PATH of the repository (used
  for ``bench/RESULTS.md``), its headings moved down one level.
- The plots ``bench/*.png`` are published at ``bench/NAME.png`` of the site, so pages
  show the files the bench scripts write.
- ``DESIGN §N`` anywhere in a rendered page (docstrings included) links to section N of
  ``design.md``; a citation of a section the contract does not have is a warning (so an
  error under ``mkdocs build --strict``).
- Docstrings are written in reStructuredText habits (````code````, ``::`` before an
  indented block, simple ``====`` tables); ``rst_to_markdown`` turns them into Markdown,
  here and (``RstDocstrings``) in the pages mkdocstrings renders.
"""

from __future__ import annotations

import html
import inspect
import logging
import re
import sys
from pathlib import Path

import griffe

log = logging.getLogger("mkdocs.hooks.distir")

ROOT = Path(__file__).resolve().parents[2]
DESIGN_PAGE = "design.md"

# --------------------------------------------------------------------------------------
# reStructuredText habits -> Markdown
# --------------------------------------------------------------------------------------

_IR_HINT = re.compile(r"%\w|![a-z]+\.|\b(dist|coll|rt|nccl|func|arith|memref)\.\w")
_BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
_CODE_SPAN = re.compile(r"``(.+?)``|`([^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _inline(text: str) -> str:
    """One line of prose: RST code spans become Markdown ones; outside them ``<`` and
    ``>`` are escaped, so that ``sliced<0>`` is not taken for an HTML tag."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(html.escape(text[pos : m.start()], quote=False))
        code = m.group(1) if m.group(1) is not None else m.group(2)
        fence = "``" if "`" in code else "`"
        pad = " " if code.startswith("`") or code.endswith("`") else ""
        out.append(f"{fence}{pad}{code}{pad}{fence}")
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def _fence(lines: list[str]) -> list[str]:
    body = [ln.rstrip() for ln in lines]
    while body and not body[-1]:
        body.pop()
    width = min((_indent(ln) for ln in body if ln.strip()), default=0)
    lang = "mlir" if any(_IR_HINT.search(ln) for ln in body) else "text"
    return ["", f"```{lang}", *(ln[width:] for ln in body), "```", ""]


def _cut(line: str, start: int) -> int | None:
    """Where the column that the border starts at ``start`` begins in ``line``: the
    start of the word after a run of two or more spaces nearest to ``start`` (RST asks
    for exact columns; hand-aligned docstrings are sometimes a character off)."""
    if len(line) <= start:
        return len(line)
    best = None
    for p in range(max(2, start - 6), min(len(line), start + 7)):
        if line[p] != " " and line[p - 1] == " " and line[p - 2] == " ":
            if best is None or abs(p - start) < abs(best - start):
                best = p
    if best is None and not line[start - 1 : start + 1].strip():
        best = start  # a blank stretch of an empty cell
    return best


def _table(lines: list[str]) -> list[str]:
    """An RST simple table as a Markdown table (a row whose first cell is blank or
    indented continues the row above), or as a text block when a row cannot be cut
    into the border's columns."""
    border = next(ln for ln in lines if _BORDER.match(ln))
    starts = [m.start() for m in re.finditer(r"=+", border)]
    has_header = sum(bool(_BORDER.match(ln)) for ln in lines) == 3
    rows: list[list[str]] = []
    header: list[str] | None = None
    borders = 0
    for ln in lines:
        if _BORDER.match(ln):
            borders += 1
            if borders == 2 and has_header and rows:
                header, rows = [" ".join(c).strip() for c in zip(*rows)], []
            continue
        if not ln.strip():
            continue
        cuts = [0] + [_cut(ln, s) for s in starts[1:]]
        if any(c is None for c in cuts) or cuts != sorted(cuts):
            return _fence(lines)
        cells = [ln[a:b].strip() for a, b in zip(cuts, cuts[1:] + [len(ln)])]
        if rows and (not cells[0] or ln[0] == " "):
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
        else:
            rows.append(cells)
    if header is None:
        header = [""] * len(starts)

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(_inline(c).replace("|", "\\|") for c in cells) + " |"

    return ["", row(header), "|" + "---|" * len(starts), *(row(r) for r in rows), ""]


def rst_to_markdown(doc: str) -> str:
    """Markdown for a docstring written in reStructuredText habits."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BORDER.match(line):  # a simple table: border, [header, border,] rows, border
            j, borders = i + 1, 1
            while j < len(lines) and borders < 3:
                borders += bool(_BORDER.match(lines[j]))
                j += 1
                if borders == 2 and (j == len(lines) or not lines[j].strip()):
                    break  # no header
            out += _table(lines[i:j])
            i = j
            continue
        stripped = line.rstrip()
        if stripped.endswith("::"):
            base = _indent(line)
            text = stripped[:-2].rstrip()
            if text:
                out.append(_inline(text) + ":")
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            k = j
            while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > base):
                k += 1
            out += _fence(lines[j:k])
            i = k
            continue
        if _indent(line) >= 4 and (not out or not out[-1].strip()):
            # an indented block after a blank line: RST's block quote, Markdown's code
            j = i
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) >= 4):
                j += 1
            out += _fence(lines[i:j])
            i = j
            continue
        out.append(_inline(line.strip()) if line.strip() else "")
        i += 1
    return "\n".join(out).strip() + "\n"


class RstDocstrings(griffe.Extension):
    """Griffe extension: every docstring mkdocstrings renders goes through
    ``rst_to_markdown`` first."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:  # noqa: ARG002 - Griffe's signature
        doc = obj.docstring
        if doc is not None and not getattr(doc, "distir_markdown", False):
            doc.value = rst_to_markdown(doc.value)
            doc.distir_markdown = True


# --------------------------------------------------------------------------------------
# generated references
# --------------------------------------------------------------------------------------


def _own_doc(obj: object) -> str:
    return inspect.cleandoc(obj.__dict__.get("__doc__") or "")


def _source(obj: object) -> str:
    module = obj if inspect.ismodule(obj) else sys.modules[obj.__module__]
    path = Path(module.__file__).resolve()
    return str(path.relative_to(ROOT))


def _syntax(op: type) -> str:
    """The keyword clauses of a ``FormattedOp`` (``dim 0``, ``axes [0]``), as the
    reference lists them."""
    from distir.dialects.format import REQUIRED

    parts = []
    kind = getattr(op, "KIND", None)
    if kind:
        parts.append(f"`{kind}` (a bare word)")
    for kw in getattr(op, "KEYWORDS", ()):
        text = f"`{kw.keyword}` ({kw.kind}"
        if kw.choices:
            text += ": " + "|".join(kw.choices)
        if kw.default is REQUIRED:
            text += ", required"
        elif kw.default is not None:
            text += f", default `{_value(kw.default)}`"
        parts.append(text + ")")
    return ", ".join(parts)


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def dialect_reference(module_name: str) -> str:
    """The reference of one dialect module: module docstring, types and attributes,
    ops, each from its docstring."""
    import importlib

    from xdsl.ir import Dialect, TypeAttribute

    module = importlib.import_module(f"distir.dialects.{module_name}")
    dialects = [v for v in vars(module).values() if isinstance(v, Dialect)]
    if len(dialects) != 1:
        raise ValueError(f"distir.dialects.{module_name} registers {len(dialects)} dialects, expected one")
    (dialect,) = dialects
    out = [rst_to_markdown(module.__doc__ or ""), ""]
    attrs = list(dialect.attributes)
    if attrs:
        out += ["### Types and attributes", ""]
        for a in attrs:
            is_type = issubclass(a, TypeAttribute)
            title, anchor = (f"!{a.name}", f"type-{a.name}") if is_type else (a.name, f"attr-{a.name}")
            out += [f"#### `{title}` {{#{anchor}}}", "", f"<small>`{a.__name__}` in `{_source(a)}`</small>", ""]
            out += [rst_to_markdown(_own_doc(a) or _missing(a)), ""]
    out += ["### Ops", ""]
    for op in dialect.operations:
        out += [f"#### `{op.name}` {{#{op.name}}}", ""]
        meta = f"`{op.__name__}` in `{_source(op)}`"
        syntax = _syntax(op)
        if syntax:
            meta += f"; options: {syntax}"
        out += [f"<small>{meta}</small>", "", rst_to_markdown(_own_doc(op) or _missing(op)), ""]
    return "\n".join(out)


def _missing(obj: type) -> str:
    log.warning("%s (%s) has no docstring for the reference", obj.__name__, _source(obj))
    return "(no docstring)"


PASS_GROUPS = {
    "passes": "Functional identities and schedule transformations (`passes/`)",
    "lowering": "Lowering (`lowering/`)",
    "synthesis": "P² synthesis (`synthesis/`)",
    "frontends": "Front ends (`frontends/`)",
}


def passes_reference() -> str:
    """Every registered pass: name, defining file, options with defaults, docstrings."""
    from distir.passes.pipeline import pass_options
    from distir.passes.registry import ALL_PASSES

    groups: dict[str, list[str]] = {}
    for name, factory in ALL_PASSES.items():
        cls = factory()
        folder = cls.__module__.split(".")[1]
        entry = [f"### `{name}` {{#{name}}}", ""]
        meta = f"`{cls.__name__}` in `{_source(cls)}`"
        entry += [f"<small>{meta}</small>", ""]
        opts = pass_options(cls)
        if opts:
            entry += ["| option | default |", "|---|---|"]
            entry += [f"| `{o}` | `{d}` |" for o, d in opts]
            entry.append("")
        docs = [inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "")]
        own = _own_doc(cls)
        generated = own.startswith(cls.__name__ + "(")  # the dataclass's own
        if own and not generated and "see the module doc" not in own and own not in docs[0]:
            docs.append(own)
        if not any(docs):
            docs = [_missing(cls)]
        entry += [rst_to_markdown(d) for d in docs if d]
        groups.setdefault(folder, []).extend(entry)
    import distir.passes.canonicalize as canon

    out = []
    for folder, entries in groups.items():
        out += [f"## {PASS_GROUPS.get(folder, f'`{folder}/`')}", "", *entries]
        if folder == "passes":
            out += ["### `canonicalize` {#canonicalize}", "", f"<small>xDSL's own pass; distir's patterns in `{_source(canon)}`</small>", ""]
            out += [rst_to_markdown(canon.__doc__ or ""), ""]
    return "\n".join(out)


def file_include(rel: str) -> str:
    """A Markdown file of the repository, headings one level down."""
    text = (ROOT / rel).read_text()
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------
# MkDocs hooks
# --------------------------------------------------------------------------------------

_MARKER = re.compile(r"<!--\s*distir:(\w+)\s*([^\s>]*)\s*-->")
_DESIGN_CITE = re.compile(r"DESIGN(?:\.md)? §(\d+)")
_SKIP_HTML = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>|<a\b.*?</a>|<h[1-6]\b.*?</h[1-6]>)", re.S)
_design_sections: dict[str, str] = {}


def on_config(config):
    from markdown.extensions.toc import slugify

    text = (Path(config["docs_dir"]) / DESIGN_PAGE).read_text()
    _design_sections.clear()
    for m in re.finditer(r"^## (\d+)\. (.+)$", text, re.M):
        _design_sections[m.group(1)] = slugify(m.group(0)[3:], "-")
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for png in sorted((ROOT / "bench").glob("*.png")):
        files.append(File.generated(config, f"bench/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs' signature
    def expand(m: re.Match) -> str:
        what, arg = m.group(1), m.group(2)
        if what == "ir":
            return dialect_reference(arg)
        if what == "passes":
            return passes_reference()
        if what == "file":
            return file_include(arg)
        log.warning("%s: unknown generator marker %r", page.file.src_uri, m.group(0))
        return m.group(0)

    return _MARKER.sub(expand, markdown)


def on_page_content(html_text, page, config, files):  # noqa: ARG001 - MkDocs' signature
    prefix = "../" * page.url.count("/")
    target = prefix + DESIGN_PAGE.replace(".md", "/" if config["use_directory_urls"] else ".html")

    def link(m: re.Match) -> str:
        anchor = _design_sections.get(m.group(1))
        if anchor is None:
            log.warning("%s cites %s, a section design.md does not have", page.file.src_uri, m.group(0))
            return m.group(0)
        return f'<a href="{target}#{anchor}">{m.group(0)}</a>'

    parts = _SKIP_HTML.split(html_text)
    return "".join(p if i % 2 else _DESIGN_CITE.sub(link, p) for i, p in enumerate(parts))
