"""Memory that moves: the export format (format.py), export, and import."""
