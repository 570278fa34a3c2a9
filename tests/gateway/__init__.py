"""Tests of the scoring gateway (`ragtrace serve`)."""
