"""Fixtures shared by every test folder. Helpers live in tests/helpers and are imported as
`tests.helpers.<name>` (the repository root is on pytest's path, see pyproject.toml)."""

from tests.helpers.gcs import gcs  # noqa: F401 (the gs:// emulator fixture)

