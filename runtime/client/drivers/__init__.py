"""Task drivers: the protocol every driver implements, and the drivers yurt ships.

Each driver's task `config {}` schema is in configs.py (`TASK_CONFIG`).
"""
