"""rocmlab: provision AMD ROCm GPU workstations and prove that every GPU trains."""

__version__ = "0.1.0"
# Where the documentation is read (galaxy.yml's ``documentation``, by directory): a host has
# the CLI, not the repository's docs/.
DOCS = "https://github.com/rocmlab/rocmlab/blob/main/docs"


def docs_url(page: str) -> str:
    """The address of ``docs/PAGE`` (e.g. ``doctor.md``), as help texts and fixes cite it."""
    return f"{DOCS}/{page}"
