"""Who is calling: the identity a request carries into the service layer."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class RequestContext:
    request_id: str
    user_id: str | None = None
    project_id: str | None = None
    roles: frozenset[str] = frozenset()
    # Roles of the service token sent beside the user's (X-Service-Token), if any.
    service_roles: frozenset[str] = frozenset()
    # A token scoped to the whole system ("all") or to a domain rather than a project;
    # every rule is for project-scoped tokens, so policy refuses these.
    system_scope: str | None = None
    domain_id: str | None = None
    # Whether the caller reaches every project's objects of the kind it works with, not
    # only its own project's: decided by the API from the kind's policy rule
    # (``arq:get_all_projects``, ``claim:all_projects``); the service layer scopes every
    # look-up by it and reads no role.
    all_projects: bool = False

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    @property
    def has_service_token(self) -> bool:
        """A valid service token (the compute service's) came beside the user's."""
        return bool(self.service_roles & {"service", "admin"})

    def to_policy_values(self) -> dict[str, Any]:
        """The credentials oslo.policy checks rules against."""
        return {
            "user_id": self.user_id,
            "project_id": self.project_id,
            "roles": sorted(self.roles),
            "service_roles": sorted(self.service_roles),
            "system_scope": self.system_scope,
            "domain_id": self.domain_id,
            "is_admin_project": True,
        }
