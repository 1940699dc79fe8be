"""The ``geoattn`` command line."""
