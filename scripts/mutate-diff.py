#!/usr/bin/env python3
"""scripts/mutate-diff.py: the mutants of a change (scripts/mutate.sh --diff).

Subcommands (scripts/mutate.sh calls them; docs/testing.md says how to use
the mode):

  check ROOT BUILD        the map (scripts/mutate-map.txt) against the tree
                          and the CTest names of BUILD, and the list of
                          equivalent mutants (scripts/mutants-equivalent.txt)
                          against the sources; exit 1 on any stale entry
  gen ROOT BASE           print the mutants of `git diff BASE` (for a look)
  run ROOT BASE           generate, build, test, report (the scratch copy is
                          made by scripts/mutate.sh first; DIR, SRC, BLD and
                          JOBS come in the environment)

Mutants are made on the lines that the diff adds or modifies in the C
sources (core/, transports/, plugins/, python/src/, tools/), never in a
comment, a string or a preprocessor line:
  relational   == != < > <= >= swapped (== for !=, < for >, <= for >=)
  boundary     < for <=, <= for <, > for >=, >= for >
  logical      && for ||, || for &&
  arithmetic   + -, * /, % /, << >>, += -=, *= /=, | &  swapped
  constant     an integer constant +1, -1 and x2
  unit         1000 / 1000000 / 1000000000 (1e3 / 1e6 / 1e9) one step up or
               down, a name part _ms/_us/_ns swapped for another unit when
               the name so made exists in the sources
  negate       if (x) for if (!(x))
  drop         a call, assignment or ++/-- statement replaced by (void)0;
  return       return; (return 0; / return NULL;) inserted before a statement
A binary operator is only taken with a space on both sides (the project's
style): `*p`, `&x`, `-1` and `a->b` are never touched.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

SCOPE = ("core/", "transports/", "plugins/", "python/src/", "tools/")
MAP = "scripts/mutate-map.txt"
EQUIV = "scripts/mutants-equivalent.txt"

KEYWORDS = set("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static
struct switch typedef union unsigned void volatile while _Bool _Atomic _Static_assert
_Alignof _Alignas _Noreturn _Thread_local bool""".split())
NOT_A_CALL = {"return", "if", "while", "for", "switch", "sizeof", "do", "else", "case",
              "goto", "break", "continue", "default", "typedef", "struct", "enum", "union"}


def die(msg, code=2):
    print("mutate: " + msg, file=sys.stderr)
    sys.exit(code)


def in_scope(path):
    return path.startswith(SCOPE) and path.endswith((".c", ".h"))


def norm(s):
    return " ".join(s.split())


# ---- the map ---------------------------------------------------------------------

def glob_re(g):
    """A map glob as a regex: `**/` any number of directories, `*` and `?`
    within one path part, [...] a character class."""
    out, i = "", 0
    while i < len(g):
        if g.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif g.startswith("**", i):
            out += ".*"
            i += 2
        elif g[i] == "*":
            out += "[^/]*"
            i += 1
        elif g[i] == "?":
            out += "[^/]"
            i += 1
        elif g[i] == "[":
            j = g.find("]", i + 1)
            if j < 0:
                out += re.escape(g[i])
                i += 1
            else:
                out += "[" + g[i + 1:j].replace("\\", "\\\\") + "]"
                i = j + 1
        else:
            out += re.escape(g[i])
            i += 1
    return re.compile(out + r"\Z")


def read_map(root):
    rows = []
    try:
        text = open(os.path.join(root, MAP), encoding="utf-8").read()
    except OSError as e:
        die("cannot read %s: %s" % (MAP, e))
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2:
            die("%s:%d: a glob and at least one CTest name, not %r" % (MAP, n, line))
        rows.append({"line": n, "glob": parts[0], "re": glob_re(parts[0]), "tests": parts[1:]})
    return rows


def source_files(root):
    """Every C source in scope, as it is on disk (tracked or not)."""
    out = []
    for top in SCOPE:
        base = os.path.join(root, top)
        for d, dirs, files in os.walk(base):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def tests_for(rows, path):
    for r in rows:
        if r["re"].match(path):
            return r
    return None


def ctest_names(build):
    """The CTest tests of build, read from its CTestTestfile.cmake files.
    Not `ctest -N`: that rewrites build/Testing/Temporary/LastTest.log, and
    this runs as a test inside the suite whose log the summary reads."""
    names = set()
    for root, dirs, files in os.walk(build):
        dirs[:] = [d for d in dirs if d not in ("CMakeFiles", "Testing")]
        if "CTestTestfile.cmake" not in files:
            continue
        with open(os.path.join(root, "CTestTestfile.cmake"), errors="replace") as f:
            names.update(re.findall(r'^\s*add_test\(\s*(?:\[=*\[)?"?([^\s"\]]+)', f.read(), re.M))
    if not names:
        die("%s has no CTestTestfile.cmake listing a test (not configured?)" % build)
    return names


def declared_tests(root):
    """Every name a tests/ CMake file could register, for the tests an
    optional dependency leaves out of this build (efa, rdma, GPU)."""
    words = set()
    for d, _, files in os.walk(os.path.join(root, "tests")):
        for f in files:
            if f == "CMakeLists.txt" or f.endswith(".cmake"):
                words |= set(re.findall(r"[\w.]+", open(os.path.join(d, f), encoding="utf-8",
                                                        errors="replace").read()))
    return words


def read_equiv(root):
    """The reviewed equivalent mutants: blocks of
         <file> <operator>
             was: <line as it is>
             now: <line as mutated>
             why: <the reason no test can tell them apart>
    separated by blank lines.  The line number is not part of it."""
    path = os.path.join(root, EQUIV)
    entries, errors = [], []
    if not os.path.exists(path):
        return entries, errors
    cur = None

    def close():
        if cur is None:
            return
        missing = [k for k in ("was", "now", "why") if not cur.get(k)]
        if missing:
            errors.append("%s:%d: entry without %s" % (EQUIV, cur["at"], ", ".join(missing)))
        else:
            entries.append(cur)

    for n, raw in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            close()
            cur = None
            continue
        m = re.match(r"\s+(was|now|why):\s?(.*)$", raw)
        if m:
            if cur is None:
                errors.append("%s:%d: %s: outside an entry" % (EQUIV, n, m.group(1)))
            elif m.group(1) == "why" and cur.get("why"):
                cur["why"] += " " + m.group(2).strip()
            else:
                cur[m.group(1)] = m.group(2) if m.group(1) != "why" else m.group(2).strip()
            continue
        if raw[0].isspace() and cur is not None and cur.get("why"):
            cur["why"] += " " + raw.strip()  # a reason on several lines
            continue
        parts = raw.split()
        if len(parts) != 2 or raw[0].isspace():
            errors.append("%s:%d: expected '<file> <operator>', got %r" % (EQUIV, n, raw))
            cur = None
            continue
        close()
        cur = {"at": n, "file": parts[0], "op": parts[1]}
    close()
    for e in entries:
        e["key"] = (e["file"], e["op"], norm(e["was"]), norm(e["now"]))
    return entries, errors


def check(root, build):
    rows = read_map(root)
    files = source_files(root)
    have = ctest_names(build)
    declared = None
    bad = []
    claimed = {id(r): 0 for r in rows}
    for f in files:
        r = tests_for(rows, f)
        if r is None:
            bad.append("%s: matches no row of %s: add one (its tests)" % (f, MAP))
        else:
            claimed[id(r)] += 1
    notes = []
    for r in rows:
        if not any(r["re"].match(f) for f in files):
            bad.append("%s:%d: %s matches no C source: re-point or remove the row"
                       % (MAP, r["line"], r["glob"]))
        elif claimed[id(r)] == 0:
            bad.append("%s:%d: %s: every file it matches is taken by a row above it"
                       % (MAP, r["line"], r["glob"]))
        for t in r["tests"]:
            if t in have:
                continue
            if declared is None:
                declared = declared_tests(root)
            if t in declared:
                notes.append("%s:%d: %s is not in this build (an optional part)"
                             % (MAP, r["line"], t))
            else:
                bad.append("%s:%d: %s is no CTest test (ctest -N): renamed?"
                           % (MAP, r["line"], t))
    entries, errors = read_equiv(root)
    bad += errors
    lines_of = {}
    for e in entries:
        p = os.path.join(root, e["file"])
        if e["file"] not in lines_of:
            try:
                lines_of[e["file"]] = {norm(x) for x in open(p, encoding="utf-8",
                                                             errors="replace")}
            except OSError:
                lines_of[e["file"]] = None
        if lines_of[e["file"]] is None:
            bad.append("%s:%d: %s does not exist: re-point the entry or remove it"
                       % (EQUIV, e["at"], e["file"]))
        elif norm(e["was"]) not in lines_of[e["file"]]:
            bad.append("%s:%d: %s has no line '%s' any more: remove the entry (or update it)"
                       % (EQUIV, e["at"], e["file"], e["was"].strip()))
    for n in notes:
        print("mutate-map: " + n)
    for b in bad:
        print("mutate-map: STALE " + b)
    print("mutate-map: %d C sources, %d rows, %d equivalent mutants listed: %s"
          % (len(files), len(rows), len(entries), "stale" if bad else "ok"))
    return 1 if bad else 0


# ---- reading C ---------------------------------------------------------------------

def classify(text):
    """One mark per character: c code, m comment, s string or character
    literal, p preprocessor line (with its continuations)."""
    n = len(text)
    kind = bytearray(b"c" * n)
    i, bol = 0, True
    while i < n:
        if bol:
            bol = False
            j = i
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "#":
                k = j
                while k < n:
                    if text[k] == "\n" and text[k - 1] != "\\":
                        break
                    if text.startswith("/*", k):
                        e = text.find("*/", k + 2)
                        k = n if e < 0 else e + 2
                        continue
                    k += 1
                kind[i:k] = b"p" * (k - i)
                i = k
                continue
        ch = text[i]
        if text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e < 0 else e
            kind[i:e] = b"m" * (e - i)
            i = e
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            e = n if e < 0 else e + 2
            kind[i:e] = b"m" * (e - i)
            i = e
        elif ch in "\"'":
            k = i + 1
            while k < n and text[k] != ch and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            k = min(k + 1, n)
            kind[i:k] = b"s" * (k - i)
            i = k
        else:
            if ch == "\n":
                bol = True
            i += 1
    return kind


TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<str>\x01+) |
    (?P<num>\.?\d(?:[eEpP][+-]|[\w.])*) |
    (?P<id>[A-Za-z_]\w*) |
    (?P<op>>>=|<<=|\.\.\.|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|
           [-+*/%<>=!~&|^?:;,.()\[\]{}\#]) |
    (?P<other>.)""", re.X)


def tokens(masked):
    return [(m.lastgroup, m.group(), m.start(), m.end())
            for m in TOKEN.finditer(masked) if m.lastgroup != "ws"]


SWAPS = {
    "relational": {"==": ["!="], "!=": ["=="], "<": [">"], ">": ["<"], "<=": [">="],
                   ">=": ["<="]},
    "boundary": {"<": ["<="], "<=": ["<"], ">": [">="], ">=": [">"]},
    "logical": {"&&": ["||"], "||": ["&&"]},
    "arithmetic": {"+": ["-"], "-": ["+"], "*": ["/"], "/": ["*"], "%": ["/"], "<<": [">>"],
                   ">>": ["<<"], "+=": ["-="], "-=": ["+="], "*=": ["/="], "/=": ["*="],
                   "|": ["&"], "&": ["|"]},
}
INT_RE = re.compile(r"(0[xX][0-9a-fA-F]+|[1-9]\d*|0)([uUlL]*)\Z")
UNIT_INT = {1000: [1000000], 1000000: [1000, 1000000000], 1000000000: [1000000]}
UNIT_FLOAT = {"1e3": ["1e6"], "1e6": ["1e3", "1e9"], "1e9": ["1e6"],
              "1000.0": ["1000000.0"], "1000000.0": ["1000.0", "1000000000.0"],
              "1000000000.0": ["1000000.0"]}
UNIT_PART = {"ms": ("us", "ns"), "us": ("ms", "ns"), "ns": ("us", "ms"),
             "MS": ("US", "NS"), "US": ("MS", "NS"), "NS": ("US", "MS")}
ASSIGN_OPS = r"(?:=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<=|>>=)"
LVALUE = r"\**[A-Za-z_]\w*(?:\s*(?:->|\.)\s*[A-Za-z_]\w*|\s*\[[^\]]*\])*"
CALL_RE = re.compile(r"(?:\(void\)\s*)?([A-Za-z_]\w*)(?:\s*(?:->|\.)\s*[A-Za-z_]\w*|\s*\[[^\]]*\])*"
                     r"\s*\(.*\)\s*;\Z")
ASSIGN_RE = re.compile(r"(" + LVALUE + r")\s*" + ASSIGN_OPS + r"\s*[^=].*;\Z")
INCDEC_RE = re.compile(r"(?:" + LVALUE + r"\s*(?:\+\+|--)|(?:\+\+|--)\s*" + LVALUE + r")\s*;\Z")


def fmt_int(text, value):
    m = INT_RE.match(text)
    base, suf = m.group(1), m.group(2)
    if base[:2] in ("0x", "0X"):
        s = "%x" % value
        if any(c in "ABCDEF" for c in base[2:]):
            s = s.upper()
        return base[:2] + s + suf
    return str(value) + suf


class Source:
    """One C file: its text, which characters are code, brace depth and the
    enclosing function of each line."""

    def __init__(self, text):
        self.text = text
        self.kind = classify(text)
        self.lines = text.split("\n")
        self.starts = []
        pos = 0
        for ln in self.lines:
            self.starts.append(pos)
            pos += len(ln) + 1
        # the code only: comments and preprocessor lines blank, literals \x01
        m = []
        for ch, k in zip(text, self.kind):
            if ch == "\n":
                m.append("\n")
            elif k == ord("c"):
                m.append(ch)
            elif k == ord("s"):
                m.append("\x01")
            else:
                m.append(" ")
        self.masked = "".join(m)
        self.mlines = self.masked.split("\n")
        # depth at each line start, and the position of the '{' opening the
        # outermost block each line is in
        depth, opener = 0, None
        self.depth, self.outer = [], []
        li = 0
        self.depth.append(0)
        self.outer.append(None)
        for i, ch in enumerate(self.masked):
            if ch == "{":
                if depth == 0:
                    opener = i
                depth += 1
            elif ch == "}":
                depth = max(depth - 1, 0)
                if depth == 0:
                    opener = None
            elif ch == "\n":
                li += 1
                self.depth.append(depth)
                self.outer.append(opener if depth > 0 else None)

    def has_preproc(self, ln):
        s, e = self.starts[ln], self.starts[ln] + len(self.lines[ln])
        return ord("p") in self.kind[s:e]

    def prev_code(self, ln):
        """The last code character before line ln, and its line."""
        i = self.starts[ln] - 1
        while i >= 0 and self.masked[i].isspace():
            i -= 1
        if i < 0:
            return "", -1
        return self.masked[i], self.masked.count("\n", 0, i)

    def function_of(self, ln):
        """The return type's kind of the function line ln is in: 'void',
        'ptr', 'value'; None outside a function body."""
        o = self.outer[ln]
        if o is None:
            return None
        i = o - 1
        while i >= 0 and self.masked[i].isspace():
            i -= 1
        if i < 0 or self.masked[i] != ")":
            return None  # a struct, an enum, an initializer
        # the signature: back to the previous top-level ; or } (or the top)
        j = i
        while j >= 0 and self.masked[j] not in ";}":
            j -= 1
        sig = self.masked[j + 1:i + 1]
        p = sig.find("(")
        head = sig[:p].split()
        if len(head) < 2 and not (head and "*" in head[0]):
            return None
        head = [w for w in head if w not in ("static", "inline", "extern")]
        rtype = " ".join(head[:-1]) + (" *" if head and head[-1].startswith("*") else "")
        if "*" in rtype:
            return "ptr"
        if rtype.split()[-1:] == ["void"]:
            return "void"
        return "value"


def line_mutants(src, ln, idents, changed=frozenset()):
    """Every mutant of line ln (0-based) as (op, new line); changed: the
    changed lines of the file (1-based)."""
    line, masked = src.lines[ln], src.mlines[ln]
    if not masked.strip() or src.has_preproc(ln) or \
            re.match(r"\s*(_Static_assert|static_assert)\b", masked):
        return []  # nothing to mutate; a static assertion only stops the build
    out = []
    toks = tokens(masked)

    def put(op, s, e, rep):
        new = line[:s] + rep + line[e:]
        if new != line:
            out.append((op, new))

    for k, (kind, text, s, e) in enumerate(toks):
        prev = toks[k - 1] if k > 0 else None
        nxt = toks[k + 1] if k + 1 < len(toks) else None
        if kind == "op":
            spaced = s > 0 and line[s - 1] in " \t" and e < len(line) and line[e] in " \t"
            operand_before = prev is not None and (
                prev[0] in ("num", "str") or (prev[0] == "id" and prev[1] not in KEYWORDS)
                or prev[1] in (")", "]"))
            binary = spaced and operand_before and nxt is not None
            if text in ("&&", "||"):
                binary = operand_before or spaced
            if not binary:
                continue
            for op in ("relational", "boundary", "logical", "arithmetic"):
                for rep in SWAPS[op].get(text, []):
                    put(op, s, e, rep)
        elif kind == "num":
            if prev is not None and prev[1] == ".":
                continue
            m = INT_RE.match(text)
            if m:
                v = int(m.group(1), 0)
                for nv in (v + 1, v - 1, v * 2):
                    if nv >= 0 and nv != v:
                        put("constant", s, e, fmt_int(text, nv))
                for nv in UNIT_INT.get(v, []):
                    put("unit", s, e, fmt_int(text, nv))
            else:
                t = text.rstrip("fFlL")
                for rep in UNIT_FLOAT.get(t, []):
                    put("unit", s, e, rep + text[len(t):])
        elif kind == "id":
            parts = text.split("_")
            for i, p in enumerate(parts):
                for u in UNIT_PART.get(p, ()):
                    cand = "_".join(parts[:i] + [u] + parts[i + 1:])
                    if cand in idents:
                        put("unit", s, e, cand)
            if text == "if" and nxt is not None and nxt[1] == "(":
                open_at = nxt[2]
                d = 0
                for i in range(open_at, len(masked)):
                    if masked[i] == "(":
                        d += 1
                    elif masked[i] == ")":
                        d -= 1
                        if d == 0:
                            new = line[:open_at + 1] + "!(" + line[open_at + 1:i] + ")" + line[i:]
                            out.append(("negate", new))
                            break
    # statements: dropped, or an early return before them
    code = masked.strip()
    fn = src.function_of(ln)
    if fn is not None and src.depth[ln] >= 1:
        c, pl = src.prev_code(ln)
        prevline = src.mlines[pl].strip() if pl >= 0 else ""
        label_before = c == ":" and re.match(r"(case\b.*|default|[A-Za-z_]\w*)\s*:\Z", prevline)
        start = c in (";", "{", "}") or label_before
        body = c == ")" or prevline.endswith("else")
        first = len(masked) - len(masked.lstrip())
        if (start or body) and code.endswith(";"):
            m = CALL_RE.match(code)
            droppable = (m and m.group(1) not in NOT_A_CALL) or \
                (ASSIGN_RE.match(code) and code.split()[0].lstrip("*").split("->")[0]
                 .split(".")[0].split("[")[0] not in KEYWORDS) or INCDEC_RE.match(code)
            if droppable:
                end = masked.rfind(";") + 1
                out.append(("drop", line[:first] + "(void)0;" + line[end:]))
        # one early return per run of changed lines (the first of the run)
        first_of_run = c == "{" or pl < 0 or (pl + 1) not in changed
        if start and first_of_run and not re.match(r"(\}|\{|else\b|case\b|default\b|return\b|break\s*;|"
                                  r"continue\s*;|goto\b|[A-Za-z_]\w*\s*:(?!:))", code):
            rep = {"void": "return;", "ptr": "return NULL;", "value": "return 0;"}[fn]
            out.append(("return", line[:first] + rep + " " + line[first:]))
    seen, uniq = set(), []
    for op, new in out:
        if new not in seen:
            seen.add(new)
            uniq.append((op, new))
    return uniq


def changed_lines(root, base):
    """{path: [line numbers]} of what `git diff BASE` adds or modifies."""
    r = subprocess.run(["git", "-C", root, "diff", "-U0", "-M", "--no-color", "--no-ext-diff",
                        base, "--"] + [s.rstrip("/") for s in SCOPE],
                       capture_output=True, text=True)
    if r.returncode != 0:
        die("git diff %s: %s" % (base, r.stderr.strip()))
    out, cur = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("+++ "):
            p = line[4:]
            cur = p[2:] if p.startswith("b/") else None
            if cur is not None and not in_scope(cur):
                cur = None
        elif line.startswith("@@") and cur:
            m = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            first, count = int(m.group(1)), int(m.group(2) or 1)
            out.setdefault(cur, []).extend(range(first, first + count))
    return out


def identifiers(root):
    ids = set()
    for top in SCOPE + ("include/",):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    txt = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                    ids.update(re.findall(r"[A-Za-z_]\w*", txt))
    return ids


def generate(root, base):
    changes = changed_lines(root, base)
    idents = identifiers(root) if changes else set()
    mutants = []
    for path in sorted(changes):
        try:
            text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        src = Source(text)
        changed = set(changes[path])
        for n in sorted(changed):
            if n - 1 >= len(src.lines):
                continue
            for op, new in line_mutants(src, n - 1, idents, changed):
                mutants.append({"id": len(mutants), "file": path, "line": n, "op": op,
                                "was": src.lines[n - 1], "now": new,
                                "key": [path, op, norm(src.lines[n - 1]), norm(new)]})
    return changes, mutants


def show(m, head):
    return "%s %s:%d %s\n    was: %s\n    now: %s" % (head, m["file"], m["line"], m["op"],
                                                     m["was"].strip(), m["now"].strip())


# ---- running them ------------------------------------------------------------------

class Runner:
    def __init__(self, root, env):
        self.root = root
        self.dir = env["DIR"]
        self.src = env["SRC"]
        self.bld = env["BLD"]
        self.jobs = env.get("JOBS", "2")
        self.all_targets = None
        self.objects = None

    def log(self, name):
        return os.path.join(self.dir, name)

    def configure(self):
        with open(self.log("cmake.log"), "w") as lf:
            r = subprocess.run(["cmake", "-S", self.src, "-B", self.bld, "-DTERN_WERROR=OFF"],
                               stdout=lf, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            die("configuring the scratch tree failed: see %s" % self.log("cmake.log"))
        h = subprocess.run(["cmake", "--build", self.bld, "--target", "help"],
                           capture_output=True, text=True).stdout
        self.all_targets = re.findall(r"^\.\.\. (\S+)", h, re.M)

    def owners(self, path):
        """The targets that compile the source file path (from the object
        files of the build: <target>.dir/.../<name>.c.o); empty before the
        first build or for a header."""
        if self.objects is None:
            self.objects = {}
            for d, _, files in os.walk(self.bld):
                m = re.search(r"/CMakeFiles/([^/]+)\.dir(/.*)?\Z", d)
                if not m:
                    continue
                for f in files:
                    if f.endswith(".c.o"):
                        tail = ((m.group(2) or "").lstrip("/") + "/" + f[:-2]).lstrip("/")
                        tail = tail.replace("__/", "")
                        self.objects.setdefault(f[:-2], []).append((tail, m.group(1)))
        return sorted({t for tail, t in self.objects.get(os.path.basename(path), [])
                       if ("/" + path).endswith("/" + tail)})

    def targets(self, tests, path=None):
        """What a mutant of path needs built: its tests' programs (each
        brings what it loads or starts at run time: its dependencies in
        tests/) and the targets that compile path.  For a header, a test
        that is no program of its own (a script, python_*) or the unmutated
        tree: every target but the test programs as well, as
        scripts/mutate.sh builds for its table."""
        progs = [x for x in tests if x in self.all_targets]
        own = self.owners(path) if path and path.endswith(".c") else []
        if own and len(progs) == len(tests):
            return sorted(set(progs + own))
        skip = re.compile(r"(all|clean|depend|edit_cache|install.*|list_install_components|"
                          r"rebuild_cache|test)\Z")
        t = [x for x in self.all_targets
             if not skip.match(x) and not re.match(r"test_|.*_vm_|.*\.(o|i|s)\Z", x)]
        return sorted(set(t + progs))

    def build(self, tests, path=None, logname="build.log"):
        with open(self.log(logname), "w") as lf:
            r = subprocess.run(["cmake", "--build", self.bld, "-j", str(self.jobs), "--target"]
                               + self.targets(tests, path), stdout=lf, stderr=subprocess.STDOUT)
        return r.returncode == 0

    def run_test(self, name, limit, logname):
        """0 passed, 1 failed, 2 timed out."""
        with open(self.log(logname), "w") as lf:
            p = subprocess.Popen(["ctest", "-R", "^%s$" % re.escape(name), "--output-on-failure",
                                  "--no-tests=error"],
                                 cwd=self.bld, stdout=lf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(p)
                return 2
        return 0 if rc == 0 else 1


def kill_group(p):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue


def order(mutants, seed):
    """A seeded order that visits every changed line once before any line
    twice, so a sample covers the change as widely as it can."""
    rng = random.Random(seed)
    by_line = {}
    for m in mutants:
        by_line.setdefault((m["file"], m["line"]), []).append(m)
    groups = list(by_line.values())
    rng.shuffle(groups)
    for g in groups:
        rng.shuffle(g)
    out, i = [], 0
    while any(i < len(g) for g in groups):
        out += [g[i] for g in groups if i < len(g)]
        i += 1
    return out


def run(root, base):
    t_start = t_wall = time.time()
    env = os.environ
    budget = float(env.get("MUTATE_BUDGET_S", "900"))
    seed = int(env.get("MUTATE_SEED", "1"))
    fixed_timeout = env.get("MUTATE_TIMEOUT_S")
    fresh = not os.path.exists(os.path.join(env["BLD"], "CMakeCache.txt"))
    R = Runner(root, env)
    R.configure()
    if check(root, R.bld) != 0:
        die("%s or %s is stale (above): fix it first" % (MAP, EQUIV))
    rows = read_map(root)
    have = ctest_names(R.bld)
    equiv = {tuple(e["key"]): e for e in read_equiv(root)[0]}
    changes, mutants = generate(root, base)
    nlines = sum(len(set(v)) for v in changes.values())
    print("mutate --diff %s: %d mutants on %d changed lines of %d C files "
          "(MUTATE_BUDGET_S=%.0f, MUTATE_SEED=%d)"
          % (base, len(mutants), nlines, len(changes), budget, seed))
    equivalent, todo, untested = [], [], []
    for m in mutants:
        row = tests_for(rows, m["file"])
        m["tests"] = [t for t in row["tests"] if t in have] if row else []
        if tuple(m["key"]) in equiv:
            equivalent.append(m)
        elif not m["tests"]:
            untested.append(m)
        else:
            todo.append(m)
    for m in untested:
        print(show(m, "NO TEST") + "\n    (the tests of its map row are not in this build)")
    needed = sorted({t for m in todo for t in m["tests"]})
    results = {"killed": [], "timeout": [], "survived": [], "notbuilt": []}
    if todo:
        # the unmutated tree, built and passing the tests used
        for m in todo:
            if open(os.path.join(R.src, m["file"]), encoding="utf-8",
                    errors="replace").read().split("\n")[m["line"] - 1] != m["was"]:
                die("the scratch copy differs from the tree at %s:%d" % (m["file"], m["line"]))
        print("mutate: scratch tree %s, build %s; tests used: %s" % (R.src, R.bld, " ".join(needed)))
        if not R.build(needed):
            die("the unmutated tree does not build: see %s" % R.log("build.log"))
        if fresh:
            t_start = time.time()  # the first full build of the scratch copy is not budgeted
        base_s = {}
        for t in needed:
            t0 = time.time()
            rc = R.run_test(t, 1800, "base-%s.log" % t)
            base_s[t] = time.time() - t0
            if rc != 0:
                die("%s fails on the unmutated tree (see %s): fix it or the map first"
                    % (t, R.log("base-%s.log" % t)))
        print("mutate: baseline passes (%s)" % ", ".join("%s %.0fs" % (t, base_s[t])
                                                         for t in needed))

        def limit(t):
            if fixed_timeout:
                return float(fixed_timeout)
            return max(30.0, 3 * base_s[t] + 10)

        builds = []
        ordered = order(todo, seed)
        sampled = 0
        skipped = 0
        for m in ordered:
            avg_build = sum(builds) / len(builds) if builds else 30.0
            est = avg_build + sum(base_s[t] for t in m["tests"])
            if time.time() - t_start + est > budget:
                skipped += 1
                continue
            sampled += 1
            path = os.path.join(R.src, m["file"])
            orig = open(path, encoding="utf-8", errors="surrogateescape").read()
            lines = orig.split("\n")
            lines[m["line"] - 1] = m["now"]
            try:
                with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write("\n".join(lines))
                t0 = time.time()
                ok = R.build(m["tests"], m["file"])
                builds.append(time.time() - t0)
                if not ok:
                    shutil.copy(R.log("build.log"), R.log("build-m%d.log" % m["id"]))
                    results["notbuilt"].append(m)
                    print("not built %s:%d %s (%s)" % (m["file"], m["line"], m["op"],
                                                      R.log("build-m%d.log" % m["id"])))
                    continue
                verdict, by = "survived", None
                for t in sorted(m["tests"], key=lambda x: base_s[x]):
                    rc = R.run_test(t, limit(t), "run-m%d.log" % m["id"])
                    if rc != 0:
                        verdict, by = ("killed" if rc == 1 else "timeout"), t
                        break
                m["by"] = by
                m["secs"] = time.time() - t0
                results[verdict].append(m)
                if verdict == "survived":
                    print(show(m, "SURVIVED") + "\n    (%s passed)" % ", ".join(m["tests"]))
                else:
                    print("%-9s%s:%d %s: %s%s (%.0fs)" % (
                        "killed", m["file"], m["line"], m["op"], by,
                        " timed out" if verdict == "timeout" else " failed", m["secs"]))
            finally:
                with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write(orig)
        # (the restored files are newer than their objects: the next run's
        # build, incremental, rebuilds them; nothing to do here)
        if skipped:
            print("mutate: sampled %d of %d mutants to fit MUTATE_BUDGET_S=%.0f (seed %d, "
                  "MUTATE_SEED=n for another sample; every changed line first once)"
                  % (sampled, len(todo), budget, seed))
    for m in equivalent:
        e = equiv[tuple(m["key"])]
        print("equivalent %s:%d %s: %s" % (m["file"], m["line"], m["op"], e["why"]))
    surv = results["survived"]
    if surv:
        print("\nmutate: %d surviving (kill each with a test, or list it with its reason in %s):"
              % (len(surv), EQUIV))
        for m in surv:
            print(show(m, "SURVIVED"))
    k = len(results["killed"]) + len(results["timeout"])
    print("mutate --diff: %d generated, %d killed%s, %d equivalent, %d surviving, %d not built, "
          "in %.0f s" % (len(mutants), k,
                         " (%d by timeout)" % len(results["timeout"]) if results["timeout"] else "",
                         len(equivalent), len(surv), len(results["notbuilt"]),
                         time.time() - t_wall))
    return 1 if surv else 0


def main(argv):
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens
    if len(argv) == 3 and argv[0] == "check":
        return check(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "gen":
        _, mutants = generate(argv[1], argv[2])
        for m in mutants:
            print(show(m, "mutant"))
        print("%d mutants" % len(mutants))
        return 0
    if len(argv) == 3 and argv[0] == "run":
        return run(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
