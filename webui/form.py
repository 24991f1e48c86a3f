"""The start form's custom fields, grouped and ordered for a ramp tester.

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
        rules.append(f'{box} {{ margin-top: 30px; position: relative; }}\n'
                     f'{box}::before {{ content: "{text}"; position: absolute; top: -28px; left: 0; '
                     f'font: 600 14px/1.2 Roboto, Helvetica, Arial, sans-serif; color: #15803d; letter-spacing: .2px; }}')  # fmt: skip
    return '<style id="llm-form-groups">\n' + "\n".join(rules) + "\n</style>"


def install_form_order(web_ui) -> None:
    """Keep the page's JSON in the given order and the form's fields in GROUPS' order."""
    web_ui.app.json.sort_keys = False
    # the page's `template_args|tojson`: Jinja's filter sorts by its own policy
    web_ui.app.jinja_env.policies["json.dumps_kwargs"] = {**web_ui.app.jinja_env.policies.get("json.dumps_kwargs", {}), "sort_keys": False}
    rebuild = web_ui.update_template_args

    def update_template_args():
        rebuild()
        args = web_ui.template_args
        if isinstance(args.get("extra_options"), dict):
            args["extra_options"] = ordered(args["extra_options"])

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
