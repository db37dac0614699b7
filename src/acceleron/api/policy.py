"""RBAC rules, defined in code and overridable by a policy file (oslo.policy).

The defaults give upstream's personas under its new defaults (Keystone's default
roles, where admin implies manager, manager member and member reader):

* a project **reader** reads its project's requests and bitstreams, and profiles;
* a project **member** also creates, binds and deletes its project's requests and
  bitstreams;
* a project **manager** also reads the hardware inventory;
* **admin** does everything; the **service** role (Nova, agents, os_acc) works with
  requests, reads the inventory and reports hosts;
* every rule is for project-scoped tokens: a system- or domain-scoped token is
  refused, whatever its roles.

Every route of the API names its rule among the rule's operations (the first rule
that names a route is the route's; ``rule_of``): the caller is checked against it
before its request body is read or validated, so that nobody learns what a body
should hold from a 400 that comes before the 403. A handler may check further rules
(or the same rule against the object it finds) once the body is read. The only routes
without a rule are those listed in ``PUBLIC_ROUTES``: the API refuses to start with
any other route that no rule names (``UnguardedRoute``), and a request that reaches a
handler without a rule is refused.

Where a rule differs from upstream's it says why (docs/api/compatibility.md lists
them). No rule has a deprecated older default, so ``[oslo_policy]
enforce_new_defaults`` changes nothing. The file named by ``[oslo_policy]
policy_file`` overrides any rule; ``acceleron policy defaults`` prints them all.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence

from oslo_config import cfg
from oslo_policy import policy

from acceleron.context import RequestContext
from acceleron.exceptions import Forbidden

# The roles that make a persona, each with those it implies in Keystone, spelled out
# so that the rules hold where the implications were not set up.
READER_ROLES = "role:reader or role:member or role:manager or role:admin"
MEMBER_ROLES = "role:member or role:manager or role:admin"
MANAGER_ROLES = "role:manager or role:admin"
IN_PROJECT = "project_id:%(project_id)s"

BASE_RULES = [
    policy.RuleDefault("admin_api", "role:admin", description="An administrator of the cloud."),
    policy.RuleDefault("project_reader_api", f"({READER_ROLES}) and {IN_PROJECT}",
                       description="A reader (or more) of the project."),
    policy.RuleDefault("project_member_api", f"({MEMBER_ROLES}) and {IN_PROJECT}",
                       description="A member (or more) of the project."),
    policy.RuleDefault("project_manager_api", f"({MANAGER_ROLES}) and {IN_PROJECT}",
                       description="A manager (or admin) of the project."),
    policy.RuleDefault("service_api", "role:service",
                       description="A service: Nova, the agents, os_acc."),
    policy.RuleDefault("project_reader_or_admin", "rule:project_reader_api or rule:admin_api",
                       description="A reader of the project, or an administrator."),
    policy.RuleDefault("project_member_or_admin", "rule:project_member_api or rule:admin_api",
                       description="A member of the project, or an administrator."),
    policy.RuleDefault("project_manager_or_admin", "rule:project_manager_api or rule:admin_api",
                       description="A manager of the project, or an administrator."),
    policy.RuleDefault("project_member_or_service",
                       "rule:project_member_api or rule:service_api",
                       description="A member of the project, or a service acting for one."),
    policy.RuleDefault("admin_or_service", "rule:admin_api or rule:service_api",
                       description="An administrator, or a service (agents, Nova)."),
    policy.RuleDefault("service_token", "service_roles:service or service_roles:admin",
                       description="A service token (X-Service-Token, the compute "
                                   "service's) came beside the user's."),
]  # fmt: skip

# Readers of a kind of object, and the services that read it too (unlike upstream,
# which lets no service-only user read: the agents, os_acc and Nova's weigher read
# with their own service credentials).
READERS = "rule:project_reader_or_admin or rule:service_api"
INVENTORY_READERS = "rule:project_manager_or_admin or rule:service_api"


def _rule(
    name: str,
    check: str,
    description: str,
    method: str,
    path: str,
    also: Sequence[tuple[str, str]] = (),
) -> policy.RuleDefault:
    """A rule for the operation ``method path`` and those ``also`` names."""
    return policy.DocumentedRuleDefault(
        name=f"acceleron:{name}",
        check_str=check,
        description=description,
        operations=[{"method": m, "path": p} for m, p in ((method, path), *also)],
        scope_types=["project"],
    )


DEVICE_PROFILE_RULES = [
    _rule("device_profile:get_all", READERS,
          "List device profiles (every project's readers see every profile).",
          "GET", "/v2/device_profiles"),
    _rule("device_profile:get_one", READERS, "Show a device profile.",
          "GET", "/v2/device_profiles/{uuid}"),
    _rule("device_profile:create", "rule:admin_api", "Create a device profile.",
          "POST", "/v2/device_profiles"),
    _rule("device_profile:update", "rule:admin_api",
          "Change a device profile's description or enable/disable it.",
          "PATCH", "/v2/device_profiles/{uuid}"),
    _rule("device_profile:delete", "rule:admin_api", "Delete device profiles.",
          "DELETE", "/v2/device_profiles/{uuid}", also=[("DELETE", "/v2/device_profiles")]),
]  # fmt: skip


HOST_RULES = [
    _rule(
        "host:get",
        "rule:admin_or_service",
        "List and show reporting hosts.",
        "GET",
        "/v2/hosts/{hostname}",
        also=[("GET", "/v2/hosts")],
    ),
    _rule(
        "host:report",
        "rule:admin_or_service",
        "Report a host's inventory (agents).",
        "PUT",
        "/v2/hosts/{hostname}/report",
        also=[("PUT", "/v2/hosts/{hostname}/report/unchanged")],
    ),
]


# The hardware inventory is for managers, admins and services, not for every tenant
# (upstream bug #2143263 let anyone read it). The spec 003 paths
# (/accelerators/deployable/...) use the deployable and attribute rules.
INVENTORY_RULES = [
    _rule("device:get_all", INVENTORY_READERS, "List devices.",
          "GET", "/v2/devices"),
    _rule("device:get_one", INVENTORY_READERS, "Show a device, and what is bound on it.",
          "GET", "/v2/devices/{uuid}", also=[("GET", "/v2/devices/{uuid}/binds")]),
    _rule("device:enable", "rule:admin_api", "Put a device back in service.",
          "POST", "/v2/devices/{uuid}/enable"),
    _rule("device:disable", "rule:admin_api",
          "Take a device out of service (its inventory is reserved in Placement).",
          "POST", "/v2/devices/{uuid}/disable"),
    _rule("device:history", "rule:admin_api",
          "Read a device's history: each tenancy (project, instance, what its region held) "
          "and how it was cleaned after.",
          "GET", "/v2/devices/{uuid}/history"),
    _rule("device:maintenance", "rule:admin_api",
          "Put a device in maintenance with a reason, or take it out (its inventory is "
          "reserved in Placement meanwhile).",
          "POST", "/v2/devices/{uuid}/maintenance"),
    _rule("deployable:maintenance", "rule:admin_api",
          "Put one deployable (a region) in maintenance with a reason, or take it out.",
          "POST", "/v2/deployables/{uuid}/maintenance"),
    _rule("deployable:get_all", INVENTORY_READERS, "List deployables.",
          "GET", "/v2/deployables", also=[("GET", "/accelerators/deployable")]),
    _rule("deployable:get_one", INVENTORY_READERS, "Show a deployable.",
          "GET", "/v2/deployables/{uuid}", also=[("GET", "/accelerators/deployable/{uuid}")]),
    _rule("deployable:program", "rule:admin_api",
          "Program a region nothing uses with a bitstream (asynchronous).",
          "PATCH", "/v2/deployables/{uuid}/program",
          also=[("PATCH", "/v2/deployables/{uuid}/program/{again}")]),
    _rule("attribute:get_all", INVENTORY_READERS,
          "List attributes, or show a deployable's attributes.", "GET", "/v2/attributes",
          also=[("GET", "/v2/deployables/{uuid}/attributes")]),
    _rule("attribute:get_one", INVENTORY_READERS, "Show an attribute.",
          "GET", "/v2/attributes/{uuid}",
          also=[("GET", "/v2/deployables/{uuid}/attributes/{key}"),
                ("GET", "/accelerators/deployable/{uuid}/attribute/{key}")]),
    _rule("attribute:create", "rule:admin_api", "Add an operator's attribute to a deployable.",
          "POST", "/v2/attributes"),
    _rule("attribute:delete", "rule:admin_api", "Delete an operator's attribute.",
          "DELETE", "/v2/attributes/{uuid}"),
]  # fmt: skip


# A project reaches its own requests; ``arq:get_all_projects`` every project's (the API
# hands the decision to the service layer, which scopes every look-up by it).
ARQ_RULES = [
    _rule("arq:get_all", READERS,
          "List accelerator requests (a project's own; admins and services: all).",
          "GET", "/v2/accelerator_requests"),
    _rule("arq:get_one", READERS, "Show an accelerator request.",
          "GET", "/v2/accelerator_requests/{uuid}"),
    _rule("arq:create", "rule:project_member_or_service",
          "Create accelerator requests from a device profile.",
          "POST", "/v2/accelerator_requests"),
    _rule("arq:update", "rule:project_member_or_service",
          "Bind or unbind accelerator requests (with a service token beside the user's).",
          "PATCH", "/v2/accelerator_requests",
          also=[("PATCH", "/v2/accelerator_requests/{uuid}")]),
    _rule("arq:program", "rule:project_member_or_service",
          "Reprogram the region of a bound accelerator request (its project's; 2.8).",
          "POST", "/v2/accelerator_requests/{uuid}/program"),
    _rule("arq:delete", "rule:project_member_or_service",
          "Delete accelerator requests (bound ones: with a service token).",
          "DELETE", "/v2/accelerator_requests",
          also=[("DELETE", "/v2/accelerator_requests/{uuid}")]),
    # Nova makes an instance's requests with whoever runs the operation (an admin's
    # evacuate) and reads and deletes them with the owner's token beside its own.
    _rule("arq:get_all_projects", "rule:admin_or_service or rule:service_token",
          "See and change every project's accelerator requests, and bind one for another "
          "project (/project_id).",
          "GET", "/v2/accelerator_requests",
          also=[("GET", "/v2/accelerator_requests/{uuid}"),
                ("PATCH", "/v2/accelerator_requests"),
                ("PATCH", "/v2/accelerator_requests/{uuid}"),
                ("POST", "/v2/accelerator_requests/{uuid}/program"),
                ("DELETE", "/v2/accelerator_requests"),
                ("DELETE", "/v2/accelerator_requests/{uuid}")]),
    # Binding claims an instance uuid for good: the compute service's work. Without
    # Keystone (auth_strategy noauth) no token tells the compute service apart, so an
    # admin or a service stands for it.
    _rule("arq:bind", "rule:service_token or (auth_strategy:noauth and rule:admin_or_service)",
          "Bind accelerator requests, and unbind or delete bound ones: the compute "
          "service's token beside the user's.",
          "PATCH", "/v2/accelerator_requests",
          also=[("PATCH", "/v2/accelerator_requests/{uuid}"),
                ("DELETE", "/v2/accelerator_requests"),
                ("DELETE", "/v2/accelerator_requests/{uuid}")]),
]  # fmt: skip

# Claims (2.12): a project's own; claim:all_projects lets a caller claim for another
# project and reach every project's claims.
CLAIM_RULES = [
    _rule("claim:create", "rule:project_member_or_service",
          "Claim accelerators for a consumer (2.12).", "POST", "/v2/claims"),
    _rule("claim:get", READERS, "Show a consumer's claim (2.12).",
          "GET", "/v2/claims/{consumer}"),
    _rule("claim:delete", "rule:project_member_or_service",
          "Release a consumer's claim (2.12).", "DELETE", "/v2/claims/{consumer}"),
    _rule("claim:all_projects", "rule:admin_or_service",
          "Claim for another project (project_id), and see and release every project's "
          "claims.",
          "POST", "/v2/claims",
          also=[("GET", "/v2/claims/{consumer}"), ("DELETE", "/v2/claims/{consumer}")]),
    _rule("claim:hostname", "rule:admin_or_service",
          "Name the host a claim's accelerators must be on (2.15; os_acc on a compute node).",
          "POST", "/v2/claims"),
]  # fmt: skip

TASK_RULES = [
    _rule("task:claim", "rule:admin_or_service", "Take a host's tasks (agents).",
          "POST", "/v2/hosts/{hostname}/tasks/claim"),
    _rule("task:update", "rule:admin_or_service", "Report a task's progress (agents).",
          "PUT", "/v2/tasks/{uuid}"),
    _rule("task:get", "rule:admin_or_service", "Show a task.", "GET", "/v2/tasks/{uuid}"),
]  # fmt: skip

QUOTA_RULES = [
    _rule(
        "quota:get",
        "rule:project_reader_or_admin or rule:service_api",
        "Show a project's usage against its limits (its readers, or an admin).",
        "GET",
        "/v2/quotas/{project_id}",
    ),
]

PLACEMENT_RULES = [
    _rule(
        "placement:sync",
        "rule:admin_api",
        "Sync the inventory to Placement now, or plan it (dry run); move it to nested "
        "providers; reconcile allocations and requests.",
        "POST",
        "/v2/placement/sync",
        also=[("POST", "/v2/placement/migrate-to-nested"), ("POST", "/v2/placement/reconcile")],
    ),
    # Placement's own default policy asks admin (or service) of most of its API; the
    # embedded one runs with noauth2 behind this rule (under auth_strategy = keystone).
    _rule(
        "placement:embedded",
        "rule:admin_or_service",
        "Call the embedded Placement's API ([placement] mode = embedded, under "
        "/placement; its version document is public).",
        "GET",
        "/placement/{path}",
        also=[(m, "/placement/{path}") for m in ("POST", "PUT", "PATCH", "DELETE")],
    ),
]

# A bitstream belongs to the project that created it and is private unless an admin
# makes it public. Readers see public ones and their project's; admins and services
# see all (agents program them, whichever project's they are). Only a member of the
# owning project (the target's project_id), or an admin, uploads its data or deletes it.
BITSTREAM_RULES = [
    _rule("bitstream:get", READERS,
          "List, show and download bitstreams (public ones and the caller's project's).",
          "GET", "/v2/bitstreams/{uuid}/data",
          also=[("GET", "/v2/bitstreams"), ("GET", "/v2/bitstreams/{uuid}")]),
    _rule("bitstream:get_all_projects", "rule:admin_or_service",
          "See every project's bitstreams, private ones included.",
          "GET", "/v2/bitstreams"),
    _rule("bitstream:create", "rule:project_member_or_admin",
          "Create a bitstream, owned by the caller's project.",
          "POST", "/v2/bitstreams"),
    _rule("bitstream:publicize", "rule:admin_api",
          "Create a public bitstream, which every project sees.",
          "POST", "/v2/bitstreams"),
    _rule("bitstream:upload", "rule:project_member_or_admin",
          "Upload a queued bitstream's data (a member of its project).",
          "PUT", "/v2/bitstreams/{uuid}/data"),
    _rule("bitstream:delete", "rule:project_member_or_admin",
          "Delete a bitstream (a member of its project).",
          "DELETE", "/v2/bitstreams/{uuid}"),
]  # fmt: skip


def list_rules() -> list[policy.RuleDefault]:
    """Every rule; the ``oslo.policy.policies`` entry point for oslopolicy tools."""
    return [
        *BASE_RULES,
        *DEVICE_PROFILE_RULES,
        *HOST_RULES,
        *INVENTORY_RULES,
        *PLACEMENT_RULES,
        *ARQ_RULES,
        *CLAIM_RULES,
        *TASK_RULES,
        *BITSTREAM_RULES,
        *QUOTA_RULES,
    ]


class Policy:
    """Checks rules; remembers each decision for ``ttl`` seconds.

    oslo.policy stats the policy files and inspects every check on each call
    (docs/benchmarks.md, "What the shortcuts save"); a decision depends only on the
    rules, the caller's credentials and the target, so it is kept briefly. An edited
    policy file takes effect within ``ttl`` seconds.
    """

    CACHE_SIZE = 10_000

    def __init__(self, conf: cfg.ConfigOpts, ttl: float = 1.0) -> None:
        self._enforcer = policy.Enforcer(conf)
        self._enforcer.register_defaults(list_rules())
        # Rules may check how callers are known: without Keystone no token tells the
        # compute service apart (``arq:bind``).
        self._auth_strategy = str(conf.auth_strategy)
        self._ttl = ttl
        self._decisions: dict[tuple[object, ...], bool] = {}
        self._expires = 0.0

    def authorize(
        self,
        rule: str,
        context: RequestContext,
        target: dict[str, object] | None = None,
        why: str = "",
    ) -> None:
        """Forbidden unless ``rule`` lets the caller; ``why`` is added to its message."""
        if not self.allows(rule, context, target):
            raise Forbidden(f"Policy does not allow acceleron:{rule} to be performed.{why}")

    def allows(
        self, rule: str, context: RequestContext, target: dict[str, object] | None = None
    ) -> bool:
        """Whether ``rule`` lets the caller (on ``target``; the caller's project if None)."""
        target = target if target is not None else {"project_id": context.project_id}
        key = (rule, context.roles, context.service_roles, context.project_id,
               context.user_id, context.system_scope, context.domain_id,
               tuple(sorted(target.items())))  # fmt: skip
        now = time.monotonic()
        if now >= self._expires or len(self._decisions) >= self.CACHE_SIZE:
            self._decisions.clear()
            self._expires = now + self._ttl
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = self._decisions[key] = self._enforce(rule, context, target)
        return allowed

    def _enforce(self, rule: str, context: RequestContext, target: dict[str, object]) -> bool:
        try:
            return bool(
                self._enforcer.authorize(
                    f"acceleron:{rule}",
                    target,
                    {**context.to_policy_values(), "auth_strategy": self._auth_strategy},
                    do_raise=False,
                )
            )
        except policy.InvalidScope:
            return False


# The routes anyone may call: no policy rule, no token. The version documents (Nova and
# keystoneauth read them before anything else), the operator page's static files (what
# it shows needs a token), the OpenAPI document and its page, and Prometheus' scrape
# ([metrics] enabled). Every other route names its rule, or the API does not start.
PUBLIC_ROUTES = frozenset(
    {
        ("GET", "/"),
        ("GET", "/v2"),
        ("GET", "/v2/"),
        ("GET", "/ui"),
        ("GET", "/ui/{name}"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/docs/oauth2-redirect"),
        ("GET", "/metrics"),
    }
)


class UnguardedRoute(Exception):
    """A route that no policy rule guards, and that is not public: the API refuses to
    start with it."""


def check_route(method: str, path: str, checks_its_rule: bool) -> None:
    """Refuse (``UnguardedRoute``) the route ``method path`` unless it is public, or names
    its rule and ``checks_its_rule`` (its handler takes ``common.CallDep``)."""
    route = f"{method} {path}"
    if (method, path) in PUBLIC_ROUTES:
        return
    if rule_of(method, path) is None:
        raise UnguardedRoute(
            f"The route {route} has no policy rule: name it among a rule's operations "
            f"(acceleron/api/policy.py), or, if anyone may call it, in PUBLIC_ROUTES."
        )
    if not checks_its_rule:
        raise UnguardedRoute(
            f"The route {route} does not check its policy rule "
            f"(acceleron:{rule_of(method, path)}): its handler must take CallDep."
        )


def _template(path: str) -> str:
    """A route's path with its parameters unnamed: ``/v2/x/{uuid}`` -> ``/v2/x/{}``."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _route_rules() -> dict[tuple[str, str], str]:
    rules: dict[tuple[str, str], str] = {}
    for rule in list_rules():
        for op in getattr(rule, "operations", []):
            key = (op["method"], _template(op["path"]))
            rules.setdefault(key, rule.name.removeprefix("acceleron:"))
    return rules


ROUTE_RULES = _route_rules()


@functools.cache  # asked at every request, of the few route templates there are
def rule_of(method: str, path: str) -> str | None:
    """The rule of the route ``method path`` (its template: ``/v2/devices/{uuid}``): the
    first rule that names it among its operations; None for none (a public route's)."""
    return ROUTE_RULES.get((method, _template(path)))


def defaults_yaml() -> str:
    """The default rules as a policy file, each with its description."""
    lines = []
    for rule in list_rules():
        lines.append(f"# {rule.description}")
        for op in getattr(rule, "operations", []):
            lines.append(f"# {op['method']}  {op['path']}")
        lines.append(f'"{rule.name}": "{rule.check_str}"')
        lines.append("")
    return "\n".join(lines)
