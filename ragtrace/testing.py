"""Retrieval quality as a test assertion: `assert_retrieval(samples, min_precision=0.7)` in any test runner.

The public name of `ragtrace.offline.assertions` (the pytest plugin's fixtures bind the same function).
"""

from ragtrace.offline.assertions import aassert_retrieval, assert_retrieval, failure_message

__all__ = ["aassert_retrieval", "assert_retrieval", "failure_message"]
