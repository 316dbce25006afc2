"""Views of a Trace: graphviz drawing, SVG rendering, text and HTML tables."""
