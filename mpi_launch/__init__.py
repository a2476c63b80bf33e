"""Hostfiles and rank environments inside an allocation (standard library only)."""
