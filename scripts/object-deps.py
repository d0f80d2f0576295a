#!/usr/bin/env python3
"""scripts/object-deps.py BUILD_DIR: fail when object files of one library
or program call each other in a circle.

What the compiler produced, not what the sources include: for each object
file (one per .c) `nm` lists the global symbols it defines and those it
needs.  Within one group an edge goes from an object to every other object
that defines a symbol it needs.  The groups: core/ (libtern's objects),
each plugin under transports/ and plugins/, the Python extension
(python/src, the CMake target tern_python; "python: not built" when this
build has no binding) and each program of tools/ (the objects linked into
one executable).  A circle (a strongly connected set of two or more
objects) means a file calls up into one that calls it, and the data path or
the layering is not one-way.  Prints, per group, its object count and each
circle with one call per edge that closes it, then one line for the whole
check; exits 1 when there is a circle, 0 when there is none, 77 (skip,
said) without nm or objects.

  OBJECT_DEPS_ONLY="core tcp"   check only the groups named
  OBJECT_DEPS_SKIP="tcp"        leave those out, said in the output (a
                                group whose circle is being removed)

Group names: core, a plugin's directory name (tcp), python, tools/<program>
(tools/tern-bench).
"""
import os
import shutil
import subprocess
import sys


def group_of(rel):
    """The group of objects under build/<rel> (a CMakeFiles/<target>.dir
    path, split), or None for objects the check leaves out (tests)."""
    target = next((d[:-4] for d in rel if d.endswith(".dir")), None)
    if rel[0] == "core" and target == "tern_core_obj":
        return "core"
    if rel[0] in ("transports", "plugins") and len(rel) > 1:
        return rel[1]
    if rel[0] == "python" and target == "tern_python":
        return "python"
    if rel[0] == "tools" and target:
        return "tools/" + target
    return None


def libraries(build):
    """{name: [object files]}: core, each plugin's, python's, each tool's."""
    libs = {}
    for root, _dirs, files in os.walk(build):
        objs = [os.path.join(root, f) for f in files if f.endswith(".c.o")]
        if not objs or "CMakeFiles" not in root:
            continue
        name = group_of(os.path.relpath(root, build).split(os.sep))
        if name:
            libs.setdefault(name, []).extend(objs)
    return libs


def order(name):
    """core first, then the plugins, the Python extension, the tools."""
    rank = 0 if name == "core" else 2 if name == "python" else 3 if "/" in name else 1
    return (rank, name)


def symbols(obj):
    out = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
        elif len(parts) == 3 and parts[1] not in ("U", "w", "v"):
            defined.add(parts[2])
    return defined, needed


def short(obj, build):
    """core/datapath/batch.c from .../tern_core_obj.dir/datapath/batch.c.o"""
    rel = os.path.relpath(obj, build)
    where, _, rest = rel.partition("CMakeFiles" + os.sep)
    _, _, tail = rest.partition(".dir" + os.sep)
    return where + tail[:-2] if tail else rel


def circles(nodes, edges):
    """Tarjan: the strongly connected sets of two or more nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def edges_of(objs):
    """({object: {objects it needs a symbol from}}, {(from, to): one such symbol})."""
    syms = {o: symbols(o) for o in objs}
    owner = {}
    for o, (defined, _n) in syms.items():
        for s in defined:
            owner.setdefault(s, o)
    edges, why = {}, {}
    for o, (_d, needed) in syms.items():
        for s in sorted(needed):
            t = owner.get(s)
            if t and t != o:
                edges.setdefault(o, set()).add(t)
                why.setdefault((o, t), s)
    return edges, why


def check(name, objs, build):
    """Print the group's line (or its circles); the number of circles."""
    objs = sorted(objs)
    edges, why = edges_of(objs)
    found = circles(objs, edges)
    if not found:
        print(f"object-deps: {name}: {len(objs)} objects, no circle")
    for comp in found:
        members = set(comp)
        print(f"object-deps: {name}: circle of {len(comp)} objects:")
        for o in comp:
            for t in sorted(edges.get(o, ())):
                if t in members:
                    print(f"    {short(o, build)} -> {short(t, build)} ({why[(o, t)]})")
    return len(found)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    if not shutil.which("nm"):
        print("object-deps: SKIP: no nm (binutils)")
        return 77
    libs = libraries(build)
    if "core" not in libs:
        print(f"object-deps: SKIP: no core objects under {build} (build first)")
        return 77
    only = os.environ.get("OBJECT_DEPS_ONLY", "").split()
    skip = os.environ.get("OBJECT_DEPS_SKIP", "").split()
    if "python" not in libs and (not only or "python" in only):
        # Said, so that a build without the binding does not pass it unseen.
        print("object-deps: python: not built (TERN_PYTHON=OFF or no Python headers)")
    bad = checked = 0
    for name in sorted(libs, key=order):
        if only and name not in only:
            continue
        if name in skip:
            print(f"object-deps: {name}: NOT CHECKED (OBJECT_DEPS_SKIP)")
            continue
        bad += check(name, libs[name], build)
        checked += 1
    if bad:
        print(f"object-deps: {bad} circle(s): move the functions to where they belong "
              "(helpers below their callers, open beside close)")
        return 1
    print(f"object-deps: {checked} groups, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
