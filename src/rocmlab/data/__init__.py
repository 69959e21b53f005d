"""Data files shipped inside the wheel (tables the doctor reads)."""
