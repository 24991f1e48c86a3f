"""Locust's page follows a run to its end: after STOP it reaches STOPPED and offers NEW, however
long the drain.

Locust's page learns the runner's state from its poll of `/stats/requests` (every 2 s), and it
polls only while the state it last read is `spawning` or `running` (its script's
`shouldRunInterval`). A stop that takes longer than one poll is read as `cleanup` (a local
runner, while its users finish: up to --stop-timeout) or `stopping` (a master, while its workers
do): the page then stops asking and shows that state until it is reloaded, while the run had
ended long before (Locust's own reports of it upstream: #2046, #2400). The suite's drain is such
a stop: streams in flight are given --stop-timeout to finish.

Here Locust's script is served with that condition widened to the two states of a stop, so the
page keeps asking until it reads `stopped` (then NEW shows). The script is Locust's own file,
read once from Locust's folder; the one expression is rewritten and nothing else. A Locust whose
script does not have that expression exactly once is served unchanged, and says so once in the
log.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re

from flask import Response, request

log = logging.getLogger("llm.webui")

# `u=i.state===CT.SPAWNING||i.state==CT.RUNNING` in Locust 2.47's minified script (names vary)
_NAME = r"[A-Za-z_$][\w$]*"
POLLING = re.compile(
    rf"(?P<var>{_NAME})=(?P<s>{_NAME})\.state===(?P<st>{_NAME})\.SPAWNING\|\|(?P=s)\.state==(?P=st)\.RUNNING"
)


def widened(script: str) -> str | None:
    """Locust's script polling in `cleanup` and `stopping` too; None when the expression is not
    there exactly once (another Locust: leave it be)."""
    found = POLLING.findall(script)
    if len(found) != 1:
        return None

    def repl(m: re.Match) -> str:
        s, st = m.group("s"), m.group("st")
        return f"{m.group(0)}||{s}.state=={st}.CLEANUP||{s}.state=={st}.STOPPING"

    return POLLING.sub(repl, script, count=1)


def install_polling_fix(web_ui) -> None:
    """Serve Locust's page script with its poll kept on through a stop (see the module's doc)."""
    app = web_ui.app
    served: dict[str, tuple[bytes, str] | None] = {}  # asset path -> (patched script, etag), None: Locust's own

    def patched(path: str) -> tuple[bytes, str] | None:
        if path not in served:
            served[path] = None
            folder = os.path.join(app.template_folder, "assets")
            file = os.path.realpath(os.path.join(folder, path))
            if os.path.dirname(file) == os.path.realpath(folder) and os.path.isfile(file):
                with open(file, encoding="utf-8") as f:
                    text = f.read()
                if "shouldRunInterval" in text:  # the page's main script
                    new = widened(text)
                    if new is None:
                        log.warning(
                            "Locust's page script is not the one the suite knows: after STOP its badge may stay on "
                            "CLEANUP or STOPPING until the page is reloaded (the LLM view at /llm follows the run)"
                        )
                    else:
                        body = new.encode("utf-8")
                        served[path] = (body, hashlib.sha256(body).hexdigest()[:32])
        return served[path]

    @app.before_request
    def _serve_script():
        if request.endpoint != "locust.send_assets" or not str(request.view_args.get("path", "")).endswith(".js"):
            return None
        found = patched(request.view_args["path"])
        if found is None:
            return None
        body, etag = found
        if etag in request.if_none_match:
            response = Response(status=304)
        else:
            response = Response(body, mimetype="application/javascript")
        response.set_etag(etag)
        response.headers["Cache-Control"] = "no-cache"  # asked again at every load: never an unpatched copy kept
        return response
