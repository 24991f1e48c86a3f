"""LLM load test: Locust entry point.

    locust -f locustfile.py --headless -u 30 -r 10 -t 60s                 # against the built-in simulator
    locust -f locustfile.py --headless -u 50 -r 10 -t 5m --host http://gpu-box:8000 --model my-model

Everything lives in the packages next to this file (README "Layout"); this file only names the
user classes Locust should run and loads the event wiring.
"""

import suite.hooks  # noqa: F401  options, results, distributed shipping, built-in simulator
from users.llm import ChatCompletionsUser, CompletionsUser  # noqa: F401

CompletionsUser.weight = 0  # run it by naming it: locust -f locustfile.py CompletionsUser
