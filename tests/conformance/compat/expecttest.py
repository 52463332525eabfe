"""Minimal stand-in for the `expecttest` package, which Debian does not ship.

PyTorch 1.13's testing internals (imported for OpInfo's op_db) only subclass
`expecttest.TestCase` and read `expecttest.ACCEPT`. The conformance harness never runs
expect tests, so this provides exactly those two names, with expect-test assertions
failing loudly if anything ever calls them.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):
        raise NotImplementedError("[conformance] expecttest stand-in: expect tests are not supported")

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        raise NotImplementedError("[conformance] expecttest stand-in: expect tests are not supported")
