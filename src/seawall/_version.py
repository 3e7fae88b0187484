"""The version, in one place (read by the build and by ``seawall.__version__``)."""

__version__ = "0.1.0.dev0"
