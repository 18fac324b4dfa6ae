"""The docker driver (Nomad's drivers/docker): containers run by a Docker daemon, reached
through its Engine API (`engine.py`)."""
