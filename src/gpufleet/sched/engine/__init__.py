"""Placement structures shared by trace replay and the scheduling framework."""
