#!/usr/bin/env python3
"""The ABI differences between two CUDA runtimes' headers (12.9 and 13.0): which exported
entry points a program built with each calls by which name, with which prototype, and
which structs and enums they use differ in layout or values.

Usage: abi-diff.py INCLUDES_12 INCLUDES_13 LIBCUDART_12 LIBCUDART_13
  INCLUDES_*: the -I folders, colon-separated (cuda_runtime_api.h and crt/host_defines.h)
  LIBCUDART_*: NVIDIA's libraries (their exported names)

Each header is preprocessed by gcc twice: as is, and with
CUDA_API_PER_THREAD_DEFAULT_STREAM (the names `--default-stream per-thread` calls). The
prototypes are compared with parameter names dropped; struct layouts by sizeof and the
offset of every field, enum values by value, both as gcc computes them (a program built
and run with each header).
"""

import os
import re
import subprocess
import sys
import tempfile


def preprocess(includes, ptds):
    args = ["gcc", "-E", "-P", "-x", "c"]
    args += [f"-I{i}" for i in includes]
    if ptds:
        args.append("-DCUDA_API_PER_THREAD_DEFAULT_STREAM")
    args += ["-include", "cuda_runtime_api.h", "/dev/null"]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def norm_param(p):
    p = " ".join(p.split())
    # A function pointer: drop its name.
    p = re.sub(r"\(\s*\*\s*\w+\s*\)", "(*)", p)
    if "(*)" in p or p in ("void", "..."):
        return p
    # Drop the trailing name (and keep the array brackets it may carry).
    m = re.match(r"^(.*?[\w\*])\s*\b(\w+)\s*((\[[^\]]*\])*)$", p)
    if m and m.group(1).strip() not in ("", "const", "struct", "enum", "unsigned"):
        return (m.group(1) + m.group(3)).replace(" *", "*").strip()
    return p


def split_params(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur)
    return [norm_param(p) for p in out if p.strip()]


def prototypes(text):
    """name -> normalized prototype, of every `extern ... cuda*(...)` declaration."""
    protos = {}
    flat = " ".join(text.split())
    for stmt in flat.split(";"):
        stmt = stmt.strip()
        m = re.match(r"^extern\s+(.*?)\b((?:__)?cuda\w*)\s*\((.*)\)\s*$", stmt)
        if not m:
            continue
        ret, name, params = m.groups()
        ret = " ".join(ret.replace("__attribute__((deprecated))", "").split())
        ret = re.sub(r"__attribute__\(\(.*?\)\)\s*", "", ret)
        protos[name] = f"{ret} {name}({', '.join(split_params(params))})"
    return protos


def aggregates(text):
    """struct name -> field names; enum names -> enumerators (from the preprocessed text)."""
    flat = " ".join(text.split())
    structs = {}
    for m in re.finditer(r"struct\s+(\w+)\s*\{", flat):
        name, i, depth = m.group(1), m.end(), 1
        while depth and i < len(flat):
            depth += flat[i] == "{"
            depth -= flat[i] == "}"
            i += 1
        body = flat[m.end() : i - 1]
        if "{" in body:  # unions and nested structs: compare their text only
            structs[name] = None
            continue
        fields = []
        for decl in body.split(";"):
            decl = re.sub(r"\[.*?\]", "", decl).strip()
            if not decl:
                continue
            if ":" in decl:  # a bit-field: no offsetof
                continue
            for part in decl.split(","):
                w = re.findall(r"\w+", part)
                if w:
                    fields.append(w[-1])
        structs[name] = fields
    enums = []
    for m in re.finditer(r"enum\s+\w*\s*\{([^}]*)\}", flat):
        for e in m.group(1).split(","):
            e = e.split("=")[0].strip()
            e = re.sub(r"__attribute__\(\(.*?\)\)", "", e).strip()
            if re.match(r"^\w+$", e):
                enums.append(e)
    return structs, enums


def measure(includes, structs, enums, bitfields):
    """`struct X` -> sizeof and offsets; enumerator -> value, as gcc lays them out."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cuda_runtime_api.h>",
             "int main(void) {"]
    for s, fields in structs.items():
        lines.append(f'printf("struct {s} size %zu\\n", sizeof(struct {s}));')
        for f in fields or []:
            if (s, f) in bitfields:
                continue
            lines.append(f'printf("struct {s} .{f} %zu\\n", offsetof(struct {s}, {f}));')
    for e in enums:
        lines.append(f'printf("enum {e} %lld\\n", (long long){e});')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "m.c"), os.path.join(d, "m")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        r = subprocess.run(["gcc", "-w", *[f"-I{i}" for i in includes], src, "-o", exe],
                           capture_output=True, text=True)
        if r.returncode != 0:
            # Drop the fields gcc cannot take offsetof (bit-fields) and retry.
            bad = set()
            for m in re.finditer(r"m\.c:(\d+):", r.stderr):
                line = lines[int(m.group(1)) - 1]
                mm = re.search(r"offsetof\(struct (\w+), (\w+)\)", line)
                if mm:
                    bad.add((mm.group(1), mm.group(2)))
            if not bad:
                sys.exit(r.stderr)
            return measure(includes, structs, enums, bitfields | bad)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    facts = {}
    for line in out.splitlines():
        key, val = line.rsplit(" ", 1)
        facts[key] = int(val)
    return facts


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    return {l.split()[2].split("@")[0] for l in out.splitlines() if len(l.split()) == 3}


def main():
    inc12, inc13, lib12, lib13 = sys.argv[1:5]
    inc = {12: inc12.split(":"), 13: inc13.split(":")}
    syms = {12: exported(lib12), 13: exported(lib13)}
    protos, texts = {}, {}
    for v in (12, 13):
        protos[v] = {}
        for ptds in (False, True):
            t = preprocess(inc[v], ptds)
            texts.setdefault(v, t)
            protos[v].update(prototypes(t))
    structs, enums, facts = {}, {}, {}
    for v in (12, 13):
        structs[v], enums[v] = aggregates(texts[v])
    common_structs = {s: f for s, f in structs[13].items() if s in structs[12]}
    for v in (12, 13):
        mine = {s: structs[v][s] for s in common_structs}
        facts[v] = measure(inc[v], mine, [e for e in enums[v] if e in set(enums[12]) & set(enums[13])], set())

    print("## Entry points whose prototype differs (same exported name)")
    for name in sorted(set(protos[12]) & set(protos[13])):
        if protos[12][name] != protos[13][name] and name in syms[12] | syms[13]:
            print(f"- {name}\n    12: {protos[12][name]}\n    13: {protos[13][name]}")

    print("\n## Structs whose layout differs")
    changed = set()
    for s in sorted(common_structs):
        k = lambda v: {a: b for a, b in facts[v].items() if a.split(" ")[1] == s}
        a, b = k(12), k(13)
        if a != b or (structs[12][s] is None and structs[12][s] != structs[13][s]):
            changed.add(s)
            diff = sorted(set(a.items()) ^ set(b.items()))
            size = f"{a.get(f'struct {s} size')} -> {b.get(f'struct {s} size')} bytes"
            fields = sorted({d[0].split(' ', 2)[2] for d in diff if ' .' in d[0]})
            only = lambda v, w: [f for f in structs[v][s] or [] if f not in (structs[w][s] or [])]
            print(f"- struct {s}: {size}; {len(fields)} fields moved"
                  + "".join(f"; only in {v}: {' '.join(only(v, w))}" for v, w in ((12, 13), (13, 12)) if only(v, w)))
    for s in sorted(set(structs[12]) - set(structs[13])):
        print(f"- struct {s}: only in 12")
    for s in sorted(set(structs[13]) - set(structs[12])):
        print(f"- struct {s}: only in 13")

    print("\n## Entry points with the same prototype whose structs differ")
    for name in sorted(set(protos[12]) & set(protos[13])):
        if protos[12][name] == protos[13][name] and name in syms[12] & syms[13]:
            used = [s for s in changed if re.search(rf"\b{s}\b", protos[13][name])]
            if used:
                print(f"- {name}: {', '.join(sorted(used))}")

    print("\n## Enumerators whose value differs")
    for key in sorted(k for k in facts[12] if k.startswith("enum ")):
        if key in facts[13] and facts[12][key] != facts[13][key]:
            print(f"- {key[5:]}: 12 = {facts[12][key]}, 13 = {facts[13][key]}")
    gone = sorted(set(enums[12]) - set(enums[13]))
    print(f"\n## Enumerators only in 12 ({len(gone)}): {' '.join(gone)}")

    print("\n## Exported names only in NVIDIA's libcudart.so.12")
    for name in sorted(syms[12] - syms[13] - {"libcudart.so.12"}):
        p = protos[12].get(name, f"{name} (no prototype in the header)")
        print(f"- {p}")
    print("\n## Exported names only in NVIDIA's libcudart.so.13")
    print(" ".join(sorted(syms[13] - syms[12] - {"libcudart.so.13"})))

    print("\n## Exported by both, not declared under that name by 12's cuda_runtime_api.h (a #define renames it, or another header declares it)")
    print(" ".join(sorted(n for n in syms[12] & syms[13] if n.startswith("cuda") and n not in protos[12])))

    print("\n## Declared in 12's header under a name a program calls, not exported by 12")
    print(" ".join(sorted(n for n in protos[12] if n not in syms[12])) or "(none)")


if __name__ == "__main__":
    main()
