"""Every page under docs/ is in mkdocs.yml's nav: CI builds the site with --strict, where a
page left out of the nav is an error (caught here in a second, without building)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATED = {"reference/ir.md", "reference/passes.md", "reference/python.md"}  # written by docs/hooks


def _pages(node) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, dict):
        return set().union(*(_pages(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_pages(v) for v in node)) if node else set()
    return set()


def test_every_page_is_in_the_nav():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = _pages(config["nav"])
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert sorted(pages - nav) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(nav - pages - GENERATED) == [], "nav entries without a page"


def test_the_built_site_opens_from_disk():
    """Links to pages as files (``autotuner.html``), not folders (``autotuner/``, which a
    browser shows as a folder listing when the site is opened from disk)."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert config.get("use_directory_urls") == "false"
