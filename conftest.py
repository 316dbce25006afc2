"""Repository-wide pytest setup: how nbval compares the lesson notebooks."""

import pytest


def pytest_collectstart(collector):
    """Compare the text/plain of drawings, not SVG bytes (they differ between Graphviz builds)."""
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "stderr")


def pytest_collection_modifyitems(config, items):
    """Every notebook cell carries the `notebooks` marker (deselect with -m 'not notebooks')."""
    for item in items:
        if str(getattr(item, "fspath", "")).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebooks)
