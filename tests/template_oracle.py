#!/usr/bin/python3
"""The reference renderer for graft's chat-template tests: Python's jinja2, set up as
Hugging Face transformers sets it up for apply_chat_template (../shared/templates/README.md):

  - jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols]);
  - the tojson filter is json.dumps(x, ensure_ascii=False, indent=None, separators=None,
    sort_keys=False) with those keyword arguments;
  - globals raise_exception(msg) (raises TemplateError(msg)) and strftime_now(fmt), which
    here formats a fixed time (--now, Unix seconds shown as UTC) instead of the current
    local time, so that graft (graft_template_options.now, `graft template --now`) and this
    script render the same text;
  - the variables are the keys of the input JSON object, passed as keyword arguments.

Usage: template_oracle.py --now SECONDS OUT_DIR TEMPLATE.jinja... -- INPUT.json...
renders every template with every input and writes, per pair, OUT_DIR/T__I.out (the text,
UTF-8) or OUT_DIR/T__I.err: "raise\\n" + the raise_exception message, or "error\\n" + the
exception's type and message. T and I are the file names without their extensions.
Exit status 0; 2 for a usage error; 3 when jinja2 cannot be imported (the test fails then).
"""
import datetime
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError as e:
    sys.stderr.write("template_oracle: cannot import jinja2 (Debian: apt-get install "
                     "python3-jinja2): %s\n" % e)
    sys.exit(3)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception raises (a TemplateError, as in transformers)."""


def make_environment(now):
    fixed = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).replace(tzinfo=None)

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return fixed.strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def main(argv):
    if len(argv) < 5 or argv[0] != "--now" or "--" not in argv:
        sys.stderr.write(__doc__)
        return 2
    now = int(argv[1])
    out_dir = argv[2]
    split = argv.index("--")
    templates, inputs = argv[3:split], argv[split + 1:]
    env = make_environment(now)
    os.makedirs(out_dir, exist_ok=True)
    for tpath in templates:
        with open(tpath, encoding="utf-8") as f:
            source = f.read()
        try:
            compiled = env.from_string(source)
            compile_error = None
        except Exception as e:  # a syntax error: every pair gets it
            compiled, compile_error = None, e
        for ipath in inputs:
            with open(ipath, encoding="utf-8") as f:
                variables = json.load(f)
            base = os.path.join(out_dir, stem(tpath) + "__" + stem(ipath))
            try:
                if compile_error is not None:
                    raise compile_error
                text = compiled.render(**variables)
            except RaisedByTemplate as e:
                result, ext = "raise\n" + str(e), ".err"
            except Exception as e:
                result, ext = "error\n%s: %s" % (type(e).__name__, e), ".err"
            else:
                result, ext = text, ".out"
            with open(base + ext, "w", encoding="utf-8", newline="") as f:
                f.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
