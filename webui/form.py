"""The start form's custom fields, grouped and ordered for a ramp tester, labelled in the suite's
words (`field_label`) and filled with the values of the last run started (`last_values`).

Locust renders the fields in the order of `template_args["extra_options"]`, a dict it rebuilds
from the parser at every page load (`WebUI.update_template_args`), and the page's
`template_args|tojson` writes that dict with its keys sorted (Jinja's `json.dumps_kwargs` policy
and Flask's `app.json.sort_keys`, both on by default): the form came out alphabetical. Here the
page's JSON keeps the order it is given, and the rebuilt dict is put in the order of `GROUPS`
(each option declares its group in plugin/options.py); a CSS rule injected into the index page (`headings_style`) writes each group's heading above its
first field. A field no group names (an option added by another plugin) comes last, with the
expert settings.
"""

from __future__ import annotations

import json
import re

from plugin.options import GROUPS  # declared with the options (plugin/options.py)


def ordered(extra_options: dict) -> dict:
    """The form's fields in the order of GROUPS; an option no group names (another plugin's) last,
    with the expert settings."""
    out = {name: extra_options[name] for _, names in GROUPS for name in names if name in extra_options}
    for name, field in extra_options.items():
        out.setdefault(name, field)
    return out


def _dom_name(option: str) -> str:
    """The name Locust's page gives an option's input (camelCase)."""
    head, *rest = option.split("_")
    return head + "".join(part.capitalize() for part in rest)


def headings_style(extra_options: dict) -> str:
    """CSS that writes each group's heading above its first field in the form (above the field's
    box: `:has()` finds the box that holds the input; nothing is added to Locust's own DOM)."""
    rules = []
    for heading, names in GROUPS:
        first = next((n for n in names if n in extra_options), None)
        if first is None:
            continue
        box = f'form div:has(> div > input[name="{_dom_name(first)}"])'
        text = heading.replace("\\", "").replace('"', "")
        rules.append(
            f"{box} {{ margin-top: 30px; position: relative; }}\n"
            f'{box}::before {{ content: "{text}"; position: absolute; top: -28px; left: 0; '
            f"font: 600 14px/1.2 Roboto, Helvetica, Arial, sans-serif; color: #15803d; letter-spacing: .2px; }}"
        )
    return '<style id="llm-form-groups">\n' + "\n".join(rules) + "\n</style>"


# Locust's page titles a field with its name split at the capitals of its camelCase ("slo" ->
# "Slo", "simProfile" -> "Sim Profile"). The suite's labels: a sentence, acronyms as written.
WORDS = {"slo": "SLO", "eos": "EOS", "id": "ID", "tls": "TLS", "ca": "CA", "sim": "simulator"}


def field_label(option: str) -> str:
    """An option's label in the form: its words in sentence case, acronyms in capitals
    (`slo` -> "SLO", `sim_profile` -> "Simulator profile", `run_id` -> "Run ID")."""
    words = [WORDS.get(w, w) for w in option.split("_")]
    return words[0][:1].upper() + words[0][1:] + "".join(" " + w for w in words[1:])


def _locust_title(option: str) -> str:
    """The title Locust's page makes of an option's name (its `hi` of the camelCase name)."""
    return re.sub(r"^.", lambda m: m.group(0).upper(), re.sub(r"([a-z0-9])([A-Z0-9])", r"\1 \2", _dom_name(option)))


def labels_script(extra_options: dict) -> str:
    """A script that writes each field's label as `field_label` says, in place of Locust's title:
    the text node that starts with Locust's title gets the label instead (the help after it is
    kept), in the field's label and in the outline's legend that sizes its notch. Fields are
    rendered again whenever the form opens (NEW): a MutationObserver relabels them."""
    names = {
        _dom_name(n): [_locust_title(n), field_label(n)] for n in extra_options if _locust_title(n) != field_label(n)
    }
    return """<script id="llm-form-labels">
(function () {
  var LABELS = @LABELS@;
  function relabel() {
    Object.keys(LABELS).forEach(function (name) {
      var old = LABELS[name][0], label = LABELS[name][1];
      document.querySelectorAll('form [name="' + name + '"]').forEach(function (el) {
        var box = el, found = [];
        for (var i = 0; i < 6 && box && !found.length; i++) {
          box = box.parentElement;
          if (!box) break;
          // the field's box: the first one up that holds its label (the outline's legend is nearer)
          found = box.tagName === 'LABEL' ? [box] : box.querySelector('label') ? [].slice.call(box.querySelectorAll('label, legend')) : [];
        }
        found.forEach(function (node) {
          var walk = document.createTreeWalker(node, NodeFilter.SHOW_TEXT), t;
          while ((t = walk.nextNode())) {
            if (t.nodeValue.indexOf(old) === 0) { t.nodeValue = label + t.nodeValue.slice(old.length); break; }
          }
        });
      });
    });
  }
  new MutationObserver(relabel).observe(document.documentElement, {childList: true, subtree: true});
  relabel();
})();
</script>""".replace("@LABELS@", json.dumps(names).replace("</", "<\\/"))


def last_values(extra_options: dict, parsed_options) -> dict:
    """The form's fields with the values of the last run started (Locust's start copies the form's
    values into the parsed options), not the command line's: Locust rebuilds the fields from the
    process's command line at every page load, so a reload (or a page opened later) showed the
    command line's simulator profile, and a start from it restarted the simulator on that one."""
    if parsed_options is None:
        return extra_options
    for name, field in extra_options.items():
        if isinstance(field, dict) and hasattr(parsed_options, name):
            field["default_value"] = getattr(parsed_options, name)
    return extra_options


def install_form_order(web_ui) -> None:
    """Keep the page's JSON in the given order, the form's fields in GROUPS' order, each with the
    value of the last run started."""
    web_ui.app.json.sort_keys = False
    # the page's `template_args|tojson`: Jinja's filter sorts by its own policy
    web_ui.app.jinja_env.policies["json.dumps_kwargs"] = {
        **web_ui.app.jinja_env.policies.get("json.dumps_kwargs", {}),
        "sort_keys": False,
    }
    rebuild = web_ui.update_template_args

    def update_template_args():
        rebuild()
        args = web_ui.template_args
        if isinstance(args.get("extra_options"), dict):
            args["extra_options"] = ordered(last_values(args["extra_options"], web_ui.environment.parsed_options))

    web_ui.update_template_args = update_template_args
    if web_ui.environment.runner is not None:
        update_template_args()


# Locust's "Number of users" and "Ramp up" fields keep only digits and '.' (its NumericField strips
# the rest as it is typed): a typed -5 showed and started 5. A minus typed or pasted into them is
# remembered, and put back in front of the value when the form is sent (the listener runs before
# Locust's, which reads the fields then), so the start check refuses it with the one line a
# headless -u -5 gets (plugin/plan.py check_users); the field shows what was sent. Emptying the
# field, or typing over all of it, forgets the minus.
SIGNED_FIELDS_SCRIPT = """<script id="llm-form-minus">
(function () {
  var FIELDS = {userCount: 1, spawnRate: 1};
  var minus = {};
  function field(t) { return t && t.form && FIELDS[t.name] ? t.name : null; }
  function whole(t) {
    try { return t.value !== '' && t.selectionStart === 0 && t.selectionEnd === t.value.length; } catch (e) { return false; }
  }
  document.addEventListener('beforeinput', function (e) {
    var name = field(e.target);
    if (!name) return;
    if ((e.data || '').indexOf('-') >= 0) minus[name] = true;
    else if (/^insert/.test(e.inputType || '') && whole(e.target)) minus[name] = false;
  }, true);
  document.addEventListener('input', function (e) {
    var name = field(e.target);
    // emptied (deleted, or set by a script), not by the minus just typed that Locust then strips
    if (name && e.target.value.replace(/-/g, '') === '' && (e.data || '').indexOf('-') < 0) minus[name] = false;
  }, true);
  document.addEventListener('submit', function (e) {
    Object.keys(minus).forEach(function (name) {
      var el = e.target.querySelector && e.target.querySelector('[name="' + name + '"]');
      if (minus[name] && el && el.value !== '' && el.value.charAt(0) !== '-') el.value = '-' + el.value;
    });
  }, true);
})();
</script>"""
