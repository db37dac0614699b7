"""Who is calling: ``noauth`` for the embedded mode, Keystone tokens for clouds.

Keystone tokens are validated by keystonemiddleware's AuthProtocol, used as it
is (caching, service tokens, revocation) and driven here through a minimal
WSGI request, since the API itself is ASGI.

Once the caller is known, the request's log lines name its user and project.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import anyio.to_thread
from oslo_config import cfg
from starlette.exceptions import HTTPException
from starlette.requests import Request

from acceleron import logs
from acceleron.context import RequestContext

LOG = logging.getLogger(__name__)

NOAUTH_ROLES = frozenset({"admin", "member", "reader"})
NOAUTH_PROJECT = "admin"
RETRY_AFTER = {"Retry-After": "5"}  # Keystone unreachable: worth trying again soon


def _split(value: str | None) -> frozenset[str]:
    return frozenset(r.strip().lower() for r in (value or "").split(",") if r.strip())


class AuthMisconfigured(Exception):
    """The configured authentication cannot work; the API refuses to start."""


class Authenticator(Protocol):
    async def context(self, request: Request) -> RequestContext: ...


class NoAuth:
    """Everyone is an admin of project ``admin``, unless the X-* headers say otherwise."""

    async def context(self, request: Request) -> RequestContext:
        headers = request.headers
        roles = _split(headers.get("x-roles")) if "x-roles" in headers else NOAUTH_ROLES
        context = RequestContext(
            request_id=request.state.request_id,
            user_id=headers.get("x-user-id") or "admin",
            project_id=headers.get("x-project-id") or NOAUTH_PROJECT,
            roles=roles,
            service_roles=_split(headers.get("x-service-roles")),
        )
        return logs.identify(context)


def _reached(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    environ["acceleron.authenticated"] = True
    start_response("204 No Content", [])
    return []


class KeystoneAuth:
    """Validates X-Auth-Token (and X-Service-Token) with keystonemiddleware."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        from keystonemiddleware import auth_token

        self._protocol = auth_token.AuthProtocol(_reached, {"oslo_config_config": conf})
        if not conf.keystone_authtoken.www_authenticate_uri:
            raise AuthMisconfigured(
                "auth_strategy is keystone but [keystone_authtoken] www_authenticate_uri is "
                "not set: set it (and the keystone_authtoken credentials) in acceleron.conf."
            )

    def _validate(self, method: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
        import webob

        wsgi_request = webob.Request.blank(path, method=method, headers=headers)
        try:
            response = wsgi_request.get_response(self._protocol)
        except Exception as error:  # Keystone unreachable, bad credentials, ...
            LOG.exception("Token validation failed")
            raise HTTPException(
                503,
                f"Cannot validate the token with Keystone right now: {error}",
                headers=RETRY_AFTER,
            ) from error
        if not wsgi_request.environ.get("acceleron.authenticated"):
            if response.status_int >= 500:  # keystonemiddleware could not reach Keystone
                raise HTTPException(
                    503,
                    f"Cannot validate the token with Keystone right now ({response.status}).",
                    headers=RETRY_AFTER,
                )
            raise HTTPException(
                401,
                "Authentication required: send a valid Keystone token in X-Auth-Token.",
                headers={"WWW-Authenticate": response.headers.get("WWW-Authenticate", "")},
            )
        return dict(wsgi_request.environ)

    async def context(self, request: Request) -> RequestContext:
        headers = {
            k: v
            for k, v in request.headers.items()
            if k in ("x-auth-token", "x-service-token", "x-openstack-request-id")
        }
        env = await anyio.to_thread.run_sync(
            self._validate, request.method, request.url.path, headers
        )
        context = RequestContext(
            request_id=request.state.request_id,
            user_id=env.get("HTTP_X_USER_ID"),
            project_id=env.get("HTTP_X_PROJECT_ID"),
            roles=_split(env.get("HTTP_X_ROLES")),
            service_roles=_split(env.get("HTTP_X_SERVICE_ROLES")),
            system_scope=env.get("HTTP_OPENSTACK_SYSTEM_SCOPE") or None,
            domain_id=env.get("HTTP_X_DOMAIN_ID") or None,
        )
        return logs.identify(context)


def from_conf(conf: cfg.ConfigOpts) -> Authenticator:
    if conf.auth_strategy == "keystone":
        return KeystoneAuth(conf)
    return NoAuth()
