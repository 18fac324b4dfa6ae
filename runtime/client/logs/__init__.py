"""Task logs: the rotation rules (`rotation.py`, pure) and the pumps that drain a task's
FIFOs into rotated files (`pump.py`)."""
