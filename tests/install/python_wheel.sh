#!/usr/bin/env bash
# A fresh venv outside the tree gets the wheel from dist/ and nothing else of ours, then runs
# `python -m tensorref` and the Python examples from a folder outside the tree, with no
# TENSORREF_LIB: the package must find the library it carries.
#
# torch (and what it requires, numpy among them) comes from the project venv, and transformers,
# which the Llama layer example compares itself with: each of those distributions' top-level
# files is linked into the fresh venv's site-packages, so that pip sees them installed and
# installs the wheel with --no-index. A real install would copy the same
# files from pip's cache or a wheelhouse; linking them spares CI 4 GiB of copies on every run.
#
#   tests/install/python_wheel.sh ROOT      (make test-wheel)
set -euo pipefail
root=$1
wheel=$(ls "$root"/dist/tensorref-*.whl)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 -m venv "$tmp/venv"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$root/.venv/bin/python" - "$site" <<'PY'
import importlib.metadata as md, os, sys
from packaging.requirements import Requirement

site = sys.argv[1]
todo, seen, done, linked = [Requirement("torch"), Requirement("numpy"), Requirement("transformers")], set(), set(), set()
while todo:
    req = todo.pop()
    name = req.name.lower().replace("_", "-")
    dist = md.distribution(name)
    for extra in ("", *req.extras):  # what the distribution requires, and each extra asked of it
        if (name, extra) not in done:
            done.add((name, extra))
            for r in map(Requirement, dist.requires or []):
                if r.marker is None or r.marker.evaluate({"extra": extra}):
                    todo.append(r)
    if name in seen:
        continue
    seen.add(name)
    base = dist.locate_file("")
    for f in dist.files or []:
        top = f.parts[0]
        if top in linked or top == ".." or top.endswith(".pth") or top == "__pycache__":
            continue
        linked.add(top)
        if not os.path.lexists(os.path.join(site, top)):  # the venv's own (setuptools) stay
            os.symlink(os.path.join(base, top), os.path.join(site, top))
print(f"linked {len(seen)} distributions ({', '.join(sorted(seen))}) from the project venv")
PY
"$tmp/venv/bin/pip" install --quiet --no-index --disable-pip-version-check "$wheel"
"$tmp/venv/bin/pip" show --files tensorref > "$tmp/files.txt"
grep -q 'tensorref/libtensorref.so' "$tmp/files.txt" \
  || { echo "the wheel carries no libtensorref.so"; exit 1; }

mkdir "$tmp/work"
cp "$root"/examples/python/*.py "$tmp/work/"
cd "$tmp/work"
unset TENSORREF_LIB
"$tmp/venv/bin/python" -m tensorref | tee "$tmp/info.txt"
grep -q "^library: $site/tensorref/libtensorref.so$" "$tmp/info.txt" \
  || { echo "python -m tensorref: the library is not the wheel's"; exit 1; }
for example in *.py; do
  echo "== $example (installed wheel, outside the tree)"
  "$tmp/venv/bin/python" "$example"
done
echo "test-wheel: the wheel installs into a fresh venv and runs the examples"
