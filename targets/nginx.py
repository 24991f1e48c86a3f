"""An nginx configuration that balances replicas for the suite: a balancer it can measure behind.

Server-sent events pass as they come (`proxy_buffering off`), connections to the replicas are kept
alive, and every reply names the replica that served it in `X-Upstream` (`$upstream_addr`, also on
errors: `always`), which `--backend-header X-Upstream` reads into each record. Used by the tests and
bench/replicas.py (nginx started in the foreground with a prefix folder of its own); deploy/ and
docs/replicas.md hold the same settings for a deployment.
"""

from __future__ import annotations

HEADER = "X-Upstream"

_CONF = """daemon off;
master_process off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    upstream replicas {{
        {policy}
{servers}
        keepalive 64;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 900s;
            add_header {header} $upstream_addr always;
        }}
    }}
}}
"""

POLICIES = {"round-robin": "", "least-outstanding": "least_conn;"}  # the suite's --balance names, nginx's directives


def config(
    folder: str, listen: str, upstreams: list[str], policy: str = "round-robin", fail_timeout_s: int = 10
) -> str:
    """nginx.conf for `nginx -p folder -c folder/nginx.conf`: listening on `listen` (127.0.0.1:PORT),
    balancing `upstreams` (HOST:PORT each) by `policy` (round-robin or least-outstanding: least_conn).
    A replica that failed is left for `fail_timeout_s` (nginx's default 10 s), then tried again."""
    servers = "\n".join(f"        server {u} max_fails=1 fail_timeout={fail_timeout_s}s;" for u in upstreams)
    return _CONF.format(folder=folder, listen=listen, servers=servers, policy=POLICIES[policy], header=HEADER)
