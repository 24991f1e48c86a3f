"""Questions asked of the target server before load starts."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import orjson
from gevent import socket as gsocket
from geventhttpclient import HTTPClient

from core.errors import InputError


from plugin.plan import RunPlan


def resolve_model(host: str, plan: RunPlan) -> str:
    """The first model id from GET /v1/models, for runs that did not name one with --model."""
    parts = urlsplit(host)
    headers = {"Authorization": f"Bearer {plan.api_key}"} if plan.api_key else {}
    client = HTTPClient(
        parts.hostname, port=parts.port, ssl=parts.scheme == "https", insecure=True,
        connection_timeout=plan.timeouts.connect, network_timeout=plan.timeouts.connect,
    )  # fmt: skip
    url = parts.path.rstrip("/") + "/v1/models"
    try:
        resp = client.get(url, headers=headers)
        status, body = resp.status_code, resp.read()
    except OSError as e:
        raise InputError(f"--host: cannot reach {host} ({type(e).__name__}: {e}); check the address and that the server is up") from None
    except Exception as e:  # noqa: BLE001 - HTTP parse errors
        raise InputError(f"--host: {host} did not answer GET {url} ({type(e).__name__}); check the address") from None
    finally:
        client.close()
    if status != 200:
        raise InputError(f"--model: not given, and GET {url} answered HTTP {status}; pass --model NAME")
    try:
        models = orjson.loads(body)["data"]
        return str(models[0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise InputError(f"--model: not given, and GET {url} listed no model; pass --model NAME") from None


def check_reachable(host: str, timeout: float) -> None:
    """A TCP connection to the host's address opens within the connect timeout (nothing is sent:
    an unreachable host is one clear line before any load, not a run of connect_error records)."""
    parts = urlsplit(host)
    address = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    try:
        gsocket.create_connection(address, timeout=timeout).close()
    except (socket.timeout, TimeoutError):
        problem = f"no connection within --timeout-connect {timeout:g}s"
    except OSError as e:
        problem = e.strerror or type(e).__name__
    else:
        return
    shown = f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"
    raise InputError(f"--host: cannot connect to {shown} ({problem}); check the address and that the server is up")
