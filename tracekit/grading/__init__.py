"""Batch grading: each submission runs in its own limited kernel; a trusted process judges."""
