# Copyright: rocmlab contributors
# Apache License 2.0
"""Where the configured ROCm release comes from (plugins/module_utils/rocm_sources.py): role
rocm_repo's one decision of repositories, suite, key and pin origin, on either release line."""

from __future__ import annotations

from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_sources, support_catalog


def rocm_sources_plan(settings):
    """The sources of the configured release (settings: rocm_repo's, with the host's
    distribution and major version); see rocm_sources.plan."""
    return rocm_sources.plan(support_catalog.shipped(), dict(settings))


class FilterModule:
    def filters(self):
        return {"rocm_sources": rocm_sources_plan}
