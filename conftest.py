# The sdist ships upstream's shared test mixins (tests/test_*_common.py, tests/test_*_mixin.py, ...) without the
# helper modules and package files they import, so they cannot be collected here. The fork's tests live in the
# subfolders (tests/utils, tests/models, tests/generation) and in utils/tests.
collect_ignore_glob = ["tests/test_*.py"]
