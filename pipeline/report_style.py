"""The style sheet every HTML report of the project shares (evaluation report, release report)."""

REPORT_CSS = (
    """body{font-family:system-ui,sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.6em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"""
    """td:first-child,th:first-child{text-align:left}
.figs{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}.figs svg{max-width:100%;height:auto}
code{background:#f3f3f3;padding:0 3px}
"""
)
