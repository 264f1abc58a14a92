"""Helpers for testing code that uses Conveyor (and for Conveyor's own suite)."""
