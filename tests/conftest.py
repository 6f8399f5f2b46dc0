"""Shared fixtures. Services a test needs skip on a laptop and fail under CI."""

from __future__ import annotations

import os

import pytest

CI = bool(os.environ.get("CI"))


def need_service(name: str, reason: str) -> None:
    """Skip a test whose service is missing, or fail it when running in CI."""
    message = f"{name} is not available: {reason}"
    if CI:
        pytest.fail(message + " (CI must run this test)")
    pytest.skip(message)
