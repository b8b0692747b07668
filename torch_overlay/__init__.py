"""torch-overlay: backports of upstream FX annotation tracing onto released torch."""
__version__ = "0.1.0"
