"""The web UI's files: `assets/` holds the page, its stylesheet and its scripts (plain ES modules,
no build step), answered by runtime/api/ui.py. Nothing here is Python but this marker."""
