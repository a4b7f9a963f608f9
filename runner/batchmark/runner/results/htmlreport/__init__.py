"""The self-contained HTML report: inline SVG charts rendered with jinja2, nothing fetched at view time."""
