"""How the suite trusts an https server: one policy (--tls-ca, --tls-insecure), the one way to build
a client context from it, and the wording of a certificate the policy refuses.

Every HTTP client of the suite (the load connections, the start probe, the /version and /metrics
probes) takes its context from `client_context`, so the chain and the host name are verified on
every connection unless --tls-insecure says otherwise. The CA file is read once, where the run
is planned, and its text travels with the plan: a worker on another machine needs no copy.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TlsPolicy:
    ca_file: str = ""  # as given (run.json names it)
    ca_pem: str = ""  # its certificates' text, trusted besides the system's
    insecure: bool = False  # no verification at all: chain nor host name


VERIFIED = TlsPolicy()  # the default: the system's CAs, chain and host name verified


def read_ca(path: str) -> str:
    """The PEM text of the CA file `path`, checked to hold at least one certificate; ValueError with
    the problem and the fix otherwise."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        raise ValueError(
            f"'{path}' does not exist; give the PEM file of the CA that signed the server's certificate"
        ) from None
    except OSError as e:
        raise ValueError(f"'{path}' cannot be read ({e.strerror}); give a readable PEM file") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(
            f"'{path}' holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA's certificate in PEM form"
        )
    try:
        ssl.create_default_context().load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise ValueError(
            f"'{path}' is not a valid PEM certificate ({getattr(e, 'reason', None) or e}); give the CA's certificate "
            "in PEM form"
        ) from None
    return text


def client_context(policy: TlsPolicy = VERIFIED, module=ssl) -> ssl.SSLContext:
    """A new client context for `policy`: the system's CAs plus --tls-ca, the chain and the host
    name checked; with --tls-insecure, neither. `module`: the ssl module whose context it is
    (gevent.ssl for gevent's sockets)."""
    ctx = module.create_default_context()
    if policy.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif policy.ca_pem:
        ctx.load_verify_locations(cadata=policy.ca_pem)
    return ctx


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH: the chain was good
_NAME_MISMATCH = (62, 64)


def failure(e: ssl.SSLError, address: str) -> str:
    """One line for a TLS handshake with `address` ('host:port') that failed with `e`: a certificate
    refused (not trusted, or not for this host name) is worded as one, with the way out."""
    if isinstance(e, ssl.SSLCertVerificationError):
        why = (e.verify_message or e.reason or str(e)).rstrip(".")
        if e.verify_code in _NAME_MISMATCH:
            return (
                f"TLS: certificate of {address} is not valid for the host name it was reached by ({why}); give --host "
                "a name the certificate holds, or pass --tls-insecure"
            )
        return f"TLS: certificate of {address} not trusted: {why}; pass --tls-ca FILE or --tls-insecure"
    why = getattr(e, "reason", None) or str(e) or type(e).__name__
    return f"TLS: handshake with {address} failed ({why}); check that the server speaks TLS at this address (else use http://)"


def insecure_warning(host: str) -> str:
    """The one warning line of a run with --tls-insecure."""
    return (
        f"--tls-insecure: the certificate of {host} is not verified (neither chain nor host name): whoever answers "
        "there gets the API key"
    )
