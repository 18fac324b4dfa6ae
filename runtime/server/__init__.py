"""The server side a client syncs with. Today: the embedded local server (`local.py`)."""
