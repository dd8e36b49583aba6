"""Helpers shared by test modules: schema checkers, manifest renderers, Hypothesis strategies, fuzzers.

A test module imports from here, never from another test module (tests/install/test_contracts.py checks),
so running one test file never runs or collects another's tests.
"""
