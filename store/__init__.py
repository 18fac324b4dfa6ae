"""Client state: what the agent persists so a restart re-attaches instead of starting over.

- `StateDB` (protocol.py): the contract, Nomad's client state interface.
- `KeyValueStateDB` (base.py): the typed layer both stores share; structs in, structs out.
- `MemoryStateDB` (memory.py): plain dicts, for fast deterministic tests.
- `open_state_db` (sqlite.py): the real one, SQLite with one coalescing writer task;
  sqlite_file.py opens the file (lock, schema, permissions, a full disk at start).
"""

from yurt.store.base import KeyValueStateDB
from yurt.store.memory import MemoryStateDB
from yurt.store.protocol import StateDB
from yurt.store.sqlite import SCHEMA_VERSION, SQLiteStateDB, open_state_db

__all__ = [
    "SCHEMA_VERSION",
    "KeyValueStateDB",
    "MemoryStateDB",
    "SQLiteStateDB",
    "StateDB",
    "open_state_db",
]
