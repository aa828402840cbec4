"""Test helpers shared by the pytest suites (random programs, runners)."""
