"""The documents say what the code does, wherever a script can tell:

1. every function of the application API (include/tern/tern.h and
   include/tern/errors.h; the plugin ABIs have docs/plugins.md) is named
   in docs/api.md;
2. the embedded default is config/tern.yaml (test_config checks the
   compiled-in text against it); where docs/configuration.md, README.md
   and tern_engine_create's comment in tern.h describe it, they name
   every transport it lists;
3. every default that docs/configuration.md or README.md quotes for a key
   of an in-tree transport, written "`key` (VALUE)", "(VALUE: ..." or
   "(VALUE = ...", is the default of that plugin's option table
   (tern-info --json);
4. every environment variable the code reads (getenv in core/,
   transports/, plugins/, tools/) is documented in docs/ or README.md;
5. every option of tern-info's usage is in README.md's tern-info entry.

usage: test_docs_code.py <source dir> <build dir>
"""

import glob
import json
import os
import re
import subprocess
import sys

SRC, BUILD = sys.argv[1], sys.argv[2]
failures = []


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def fail(msg):
    failures.append(msg)


def strip_comments(c):
    c = re.sub(r"/\*.*?\*/", " ", c, flags=re.S)
    return re.sub(r"//[^\n]*", " ", c)


def public_functions():
    names = set()
    for h in ("include/tern/tern.h", "include/tern/errors.h"):
        code = strip_comments(read(h))
        code = re.sub(r"^\s*#.*$", " ", code, flags=re.M)
        names.update(re.findall(r"\b(tern_[a-z0-9_]+)\s*\(", code))
    return sorted(names)


def check_api_doc():
    api = read("docs/api.md")
    funcs = public_functions()
    if len(funcs) < 20:
        fail(f"only {len(funcs)} functions found in the public headers: the parser is broken")
    for f in funcs:
        if not re.search(r"\b" + f + r"\b", api):
            fail(f"docs/api.md does not name {f} (declared in include/tern/)")
    return len(funcs)


def paragraph_with(text, phrase):
    """The paragraph (blank-line separated) holding phrase, or None."""
    for para in re.split(r"\n\s*\n", text):
        if phrase in para:
            return para
    return None


def check_embedded_default():
    yaml = read("config/tern.yaml")
    names = re.findall(r"^\s*-\s*name:\s*([A-Za-z0-9._-]+)", yaml, flags=re.M)
    if not names:
        fail("config/tern.yaml lists no transport")
    places = {
        "docs/configuration.md": paragraph_with(read("docs/configuration.md"),
                                                "embedded default, whose text is exactly"),
        "README.md": paragraph_with(read("README.md"), "else the embedded default"),
    }
    tern_h = read("include/tern/tern.h")
    m = re.search(r"/\*((?:(?!\*/).)*embedded default(?:(?!\*/).)*)\*/\s*tern_engine \*"
                  r"tern_engine_create\(", tern_h, flags=re.S)
    places["include/tern/tern.h (tern_engine_create)"] = m.group(1) if m else None
    for where, para in places.items():
        if para is None:
            fail(f"{where}: no description of the embedded default found")
            continue
        for n in names:
            if not re.search(r"\b" + re.escape(n) + r"\b", para, flags=re.I):
                fail(f"{where} describes the embedded default without its transport "
                     f"'{n}' (config/tern.yaml lists {', '.join(names)}): {para.strip()[:300]}")
    return names


def transport_defaults():
    """{transport: {key: default}} from tern-info --json of a config naming them all."""
    out = {}
    for t in ("shm", "tcp", "efa", "rdma"):
        so = os.path.join(BUILD, "lib", "tern", f"libtern-{t}.so")
        if not os.path.exists(so):
            continue
        cfg = os.path.join(BUILD, f"docs-code-{t}.yaml")
        with open(cfg, "w") as f:
            f.write(f"server_name: 127.0.0.1:0\ntransports:\n  - name: {t}\n"
                    "log_level: error\n")
        try:
            r = subprocess.run([os.path.join(BUILD, "bin", "tern-info"), "--json",
                                "--config", cfg], capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(cfg)
        try:
            d = json.loads(r.stdout)
        except ValueError:
            continue
        for tr in d.get("transports", []):
            opts = tr.get("options") or []
            if tr.get("name") == t and opts:
                out[t] = {o["key"]: str(o.get("default")) for o in opts}
    return out


def check_transport_defaults():
    tables = transport_defaults()
    if "tcp" not in tables or "shm" not in tables:
        fail(f"tern-info --json gave no option table for tcp or shm (got {sorted(tables)})")
    checked = 0
    conf = read("docs/configuration.md")
    sect = conf[conf.index("## Transport entries"):]
    sect = sect[:sect.index("\n## ", 4)]
    # one bullet per transport: "- `tcp`: ..." up to the next bullet
    chunks = [("docs/configuration.md", m.group(1), m.group(2)) for m in
              re.finditer(r"^- `([a-z]+)`[^\n]*?:(.*?)(?=^- `|\Z)", sect, flags=re.M | re.S)]
    readme = read("README.md")
    para = paragraph_with(readme, "Per-transport keys")
    if para:
        for m in re.finditer(r"\b(shm|tcp|rdma|efa)\b((?:(?!;\s*(?:shm|tcp|rdma|efa)\b).)*)",
                             para, flags=re.S):
            chunks.append(("README.md", m.group(1), m.group(2)))
    for where, t, text in chunks:
        if t not in tables:
            continue
        for m in re.finditer(r"`([a-z_]+)`\s*\(\s*(-?[0-9][0-9A-Za-z]*)\s*(\)|:|=|\s+auto)",
                             text):
            key, val = m.group(1), m.group(2)
            if key not in tables[t]:
                fail(f"{where}: {t} has no key `{key}` (its option table: "
                     f"{', '.join(sorted(tables[t]))})")
                continue
            checked += 1
            if tables[t][key] != val:
                fail(f"{where}: {t} `{key}` is documented with default {val}, the plugin's "
                     f"option table says {tables[t][key]}")
    if checked < 5:
        fail(f"only {checked} transport defaults found in the docs: the parser is broken")
    return checked


def check_environment():
    docs = read("README.md") + "".join(
        open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(SRC, "docs", "*.md")))
    seen = set()
    for d in ("core", "transports", "plugins", "tools"):
        for p in glob.glob(os.path.join(SRC, d, "**", "*.c"), recursive=True):
            with open(p, encoding="utf-8", errors="replace") as f:
                for var in sorted(set(re.findall(r'getenv\(\s*"([A-Za-z_0-9]+)"\s*\)',
                                                 f.read()))):
                    seen.add(var)
                    if var not in docs:
                        fail(f"{os.path.relpath(p, SRC)} reads ${var}, which no document "
                             f"names (docs/, README.md)")
    return sorted(seen)


def check_tern_info_usage():
    r = subprocess.run([os.path.join(BUILD, "bin", "tern-info"), "--help"],
                       capture_output=True, text=True, timeout=60)
    usage = (r.stdout + r.stderr).split("\n\n")[0]
    opts = sorted(set(re.findall(r"(--[a-z][a-z-]*)", usage)))
    entry = paragraph_with(read("README.md"), "- `tern-info ")
    entry = entry[entry.index("- `tern-info "):] if entry else ""
    entry = entry.split("\n- ")[0]
    if not opts:
        fail("tern-info --help shows no option")
    for o in opts:
        if o not in entry:
            fail(f"README.md's tern-info entry lacks {o} (tern-info --help: {usage.strip()})")
    return opts


n = check_api_doc()
names = check_embedded_default()
k = check_transport_defaults()
env = check_environment()
opts = check_tern_info_usage()
if failures:
    for f in failures:
        print("test_docs_code: FAIL:", f, file=sys.stderr)
    sys.exit(1)
print(f"test_docs_code: ok: {n} API functions in docs/api.md; embedded default "
      f"({', '.join(names)}) described alike; {k} transport defaults match; environment "
      f"{', '.join(env)} documented; tern-info {' '.join(opts)} in README.md")
