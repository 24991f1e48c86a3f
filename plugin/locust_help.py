"""`locust -f locustfile.py --help` with the suite's options, grouped, with defaults and variables.

Locust prints --help before it imports any locustfile (locust/argument_parser.py
`parse_locustfile_option`), so the locustfile's own `init_command_line_parser` listener never runs
for it. Installing the project (`pip install .`, a line of requirements.txt) puts this file into the
environment as the module `llm_loadtest_locust_help`, with `plugin/locust_help.pth` beside it: a
line Python runs at start-up that imports this module only in the `locust` program asked for
-h/--help (any other program, or locust without help, imports nothing). `install` then adds a
listener to the event Locust's help parser fires; the listener asks Locust's own -f parser
(command line, LOCUST_LOCUSTFILE, locust.conf) which locustfile it was given, and adds the suite's
options (plugin/options.py `add_arguments`) only when that is a `locustfile.py` whose folder holds
plugin/options.py: another locustfile's help is Locust's own, unchanged.
"""

from __future__ import annotations

import os
import sys


def install() -> None:
    """Start-up: listen for Locust's help parser, in the `locust` program asked for help only."""
    if os.path.basename(sys.argv[0]) != "locust" or not {"-h", "--help"} & set(sys.argv[1:]):
        return
    from locust import events

    if _add_suite_options not in events.init_command_line_parser._handlers:  # a .pth may be read twice (lib64 -> lib)
        events.init_command_line_parser.add_listener(_add_suite_options)


def suite_folder() -> str | None:
    """The suite's checkout when the locustfile Locust was given is its locustfile.py."""
    from locust.argument_parser import get_empty_argument_parser

    options, _ = get_empty_argument_parser(add_help=False).parse_known_args()
    path = os.path.abspath(options.locustfile)
    folder = os.path.dirname(path)
    if os.path.basename(path) != "locustfile.py" or not os.path.isfile(path):
        return None
    return folder if os.path.isfile(os.path.join(folder, "plugin", "options.py")) else None


def _add_suite_options(parser, **_kw) -> None:
    folder = suite_folder()
    if folder is None:
        return
    sys.path.insert(0, folder)  # as Locust does before it imports a locustfile
    from plugin.options import add_arguments

    add_arguments(parser, for_help=True)
