"""Fixtures shared by the test files."""

import pytest
from engine_helpers import reset_accelerate_state


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate's process-wide state reset after the test: each test builds its own ``Accelerator`` (a file asks
    for it on every test with ``pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")``)."""
    yield
    reset_accelerate_state()
