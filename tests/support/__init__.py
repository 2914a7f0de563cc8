"""Helpers the tests of several areas share (tests/ is on sys.path through its conftest)."""
