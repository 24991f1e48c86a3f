"""Questions asked of the target server before load starts.

`check_server` is the one check of a target, for a headless start and for every start from the web
form (plugin.run.check_target calls it): the host answers a TCP connect; GET HOST/v1/models tells
the `/v1` mistake apart (a --host that already ends in /v1: every request would go to /v1/v1/...);
a --model the server does not list is refused; an unnamed model is the first the server lists.
Every problem is one line naming the option and the fix, before any request is sent. A --host of
several replicas (targets/) is checked replica by replica, and the line names the one that failed.
"""

from __future__ import annotations

import logging
import ssl
from urllib.parse import urlsplit

import gevent
import orjson
from gevent import socket as gsocket
from gevent import ssl as gssl
from geventhttpclient import HTTPClient

from core.errors import InputError
from core.tls import client_context, insecure_warning
from core.tls import failure as tls_failure
from core.urls import public_url
from plugin.plan import RunPlan
from targets.backends import split_hosts

log = logging.getLogger("llm")

MODELS = "/v1/models"
ATTEMPTS = 3  # of the start check's connections, when one is reset or refused
PAUSE_S = 0.5  # between two attempts


def check_server(host: str, plan: RunPlan) -> RunPlan:
    """The target answers, is addressed without a doubled /v1, and serves the plan's model (raises
    InputError). Returns the plan with the model filled in when it named none. Several replicas:
    each, in order (the first names the model when the plan names none; each must serve it)."""
    urls = split_hosts(host)
    if len(urls) > 1:
        for i, url in enumerate(urls):
            try:
                plan = check_server(url, plan)
            except InputError as e:
                raise InputError(f"{e} (replica {i + 1} of {len(urls)} in --host)") from None
        return plan
    check_reachable(host, plan.timeouts.connect)
    shown = public_url(host)
    if plan.tls.insecure:
        log.warning(insecure_warning(shown))
    status, body = _get(host, MODELS, plan)
    if status == 200:
        models = _model_ids(body)
        if plan.model:
            if models and plan.model not in models:
                raise InputError(f"--model: '{plan.model}' is not served by {shown}; it serves: {', '.join(models)}")
            return plan
        if not models:
            raise InputError(f"--model: not given, and GET {shown}{MODELS} listed no model; pass --model NAME")
        return plan.with_model(models[0])
    _refuse_v1_mistake(host, status, plan)
    if status in (401, 403):
        raise InputError(
            f"--api-key: GET {shown}{MODELS} answered HTTP {status}; give the server's key (--api-key or LOCUST_API_KEY)"
        )
    if not plan.model:
        raise InputError(f"--model: not given, and GET {shown}{MODELS} answered HTTP {status}; pass --model NAME")
    log.warning("GET %s%s answered HTTP %s: cannot check that it serves --model %s", shown, MODELS, status, plan.model)
    return plan


def _refuse_v1_mistake(host: str, status: int, plan: RunPlan) -> None:
    """The suite adds /v1/... to --host: a host that ends in /v1 doubles it, and a server whose
    /models answers where /v1/models does not serves its API elsewhere."""
    shown = public_url(host)
    if urlsplit(host).path.rstrip("/").lower().endswith("/v1"):
        raise InputError(f"--host: drop /v1 from {shown} (the suite adds /v1/...)")
    if status == 404 and _get(host, "/models", plan)[0] == 200:
        raise InputError(
            f"--host: {shown}{MODELS} is not found but {shown}/models answers; the suite adds /v1/... to --host, "
            "so give the address under which /v1/chat/completions is served"
        )


def resolve_model(host: str, plan: RunPlan) -> str:
    """The first model id from GET /v1/models (of the first replica), for runs that did not name one with --model."""
    host = split_hosts(host)[0]
    shown = public_url(host)
    status, body = _get(host, MODELS, plan)
    if status != 200:
        _refuse_v1_mistake(host, status, plan)
        raise InputError(f"--model: not given, and GET {shown}{MODELS} answered HTTP {status}; pass --model NAME")
    models = _model_ids(body)
    if not models:
        raise InputError(f"--model: not given, and GET {shown}{MODELS} listed no model; pass --model NAME")
    return models[0]


def _get(host: str, path: str, plan: RunPlan) -> tuple[int, bytes]:
    """GET HOST+path within the connect timeout: (status, body), or InputError when nothing answers."""
    status, _, body = get_with_headers(host, path, plan)
    return status, body


def get_with_headers(host: str, path: str, plan: RunPlan) -> tuple[int, dict[str, str], bytes]:
    """GET HOST+path within the connect timeout: (status, headers with lower-case names, body), or
    InputError when nothing answers. A connection reset or refused is tried again (ATTEMPTS in all,
    PAUSE_S apart): one reset, from a server or a proxy in between, does not refuse a run. Several
    replicas: the first is asked (a question about the server, such as its version)."""
    host = split_hosts(host)[0]
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _get_once(host, path, plan)
        except _Retry as e:
            if attempt == ATTEMPTS:
                raise InputError(
                    f"--host: cannot reach {public_url(host)} ({e}, {ATTEMPTS} attempts); check the address "
                    "and that the server is up"
                ) from None
            gevent.sleep(PAUSE_S)
    raise AssertionError("unreachable")


class _Retry(Exception):
    """A connection reset or refused: worth another attempt."""


def _get_once(host: str, path: str, plan: RunPlan) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(host)
    headers = {"Authorization": f"Bearer {plan.api_key}"} if plan.api_key else {}
    client = HTTPClient(
        parts.hostname,
        port=parts.port,
        ssl=parts.scheme == "https",
        insecure=plan.tls.insecure,
        ssl_context_factory=lambda **_: client_context(plan.tls, gssl),  # the load's policy (core/tls.py)
        connection_timeout=plan.timeouts.connect,
        network_timeout=plan.timeouts.connect,
    )
    url = parts.path.rstrip("/") + path
    try:
        resp = client.get(url, headers=headers)
        return resp.status_code, {str(k).lower(): str(v) for k, v in resp.items()}, resp.read()
    except ssl.SSLError as e:  # before the request (and its key) was written
        raise InputError(tls_failure(e, f"{parts.hostname}:{parts.port or 443}")) from None
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError) as e:
        raise _Retry(f"{type(e).__name__}: {e}") from None
    except TimeoutError:  # the TCP check connected just before (check_server)
        raise InputError(
            f"--host: {public_url(host)} accepted a connection, but GET {url} got no answer in "
            f"{plan.timeouts.connect:g} s (--timeout-connect); check that the server is ready (one still "
            "loading its model may accept connections) and serves the OpenAI API there"
        ) from None
    except OSError as e:
        raise InputError(
            f"--host: cannot reach {public_url(host)} ({type(e).__name__}: {e}); check the address and that the server is up"
        ) from None
    except Exception as e:
        raise InputError(
            f"--host: {public_url(host)} did not answer GET {url} ({type(e).__name__}); check the address"
        ) from None
    finally:
        client.close()


def _model_ids(body: bytes) -> list[str]:
    """The ids an OpenAI-style model list names ([] when it is not one)."""
    try:
        data = orjson.loads(body)["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return []


def check_reachable(host: str, timeout: float) -> None:
    """A TCP connection to the host's address opens within the connect timeout (nothing is sent:
    an unreachable host is one clear line before any load, not a run of connect_error records).
    A connection reset or refused is tried again (ATTEMPTS in all, PAUSE_S apart); a connect that
    timed out is not (it waited the whole --timeout-connect). Several replicas: each."""
    urls = split_hosts(host)
    if len(urls) > 1:
        for url in urls:
            check_reachable(url, timeout)
        return
    parts = urlsplit(host)
    address = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    for attempt in range(1, ATTEMPTS + 1):
        try:
            gsocket.create_connection(address, timeout=timeout).close()
        except TimeoutError:
            problem = f"no connection within --timeout-connect {timeout:g}s"
            break
        except OSError as e:
            problem = (e.strerror or type(e).__name__) + (f", {ATTEMPTS} attempts" if attempt == ATTEMPTS else "")
            if attempt < ATTEMPTS:
                gevent.sleep(PAUSE_S)
        else:
            return
    shown = f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"
    raise InputError(f"--host: cannot connect to {shown} ({problem}); check the address and that the server is up")
