import pytest

from toy_operator import toy_samples


@pytest.fixture
def samples():
    return toy_samples()
