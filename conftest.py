import pytest


# The sdist ships upstream's shared test mixins (tests/test_*_common.py, tests/test_*_mixin.py, ...) without the
# helper modules and package files they import, so they cannot be collected here. The fork's tests live in the
# subfolders (tests/utils, tests/models, tests/generation) and in utils/tests.
collect_ignore_glob = ["tests/test_*.py"]

# The patches' tests carry upstream's markers only; the fork's `compile` marker selects all of them
# (`pytest tests/generation -m compile`).
COMPILE_MARKERS = ("torch_compile_test", "torch_export_test")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in COMPILE_MARKERS):
            item.add_marker(pytest.mark.compile)
