"""The test suite's root: helpers shared across directories live beside it (``figures.py``,
``servers.py``) and are importable from every test module."""
