#!/usr/bin/env bash
# The crate as a library user gets it, checked in CI:
#  1. the README's quick start compiles as written, in a new crate with the README's
#     `[dependencies]` lines (the crate by path instead of by version);
#  2. that crate's normal dependency tree (default features) holds none of the CLI's crates;
#  3. every dependency the crate can build with (all features, this host) declares a
#     rust-version no newer than ours (clippy's incompatible_msrv checks our own code).
# Usage: scripts/library_user.sh   (offline: every crate comes from the local registry cache)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$ROOT/target/library-user"
rm -rf "$WORK/crate"
mkdir -p "$WORK/crate/src"

python3 - "$ROOT/README.md" "$WORK/crate" "$ROOT" <<'EOF'
import re, sys
readme, crate, root = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(readme).read()
using = text[text.index("## Using it"):]
toml = re.search(r"```toml\n(.*?)```", using, re.S)
rust = re.search(r"```rust(?:,no_run)?\n(.*?)```", using, re.S)
if not toml or not rust:
    sys.exit("README's 'Using it' has no toml or rust block")
deps = toml.group(1)
if 'rocketmq-actor = "' not in deps:
    sys.exit("the README's [dependencies] lines do not name rocketmq-actor by version")
deps = re.sub(r'rocketmq-actor = "[^"]*"', 'rocketmq-actor = { path = "%s" }' % root, deps)
open(crate + "/Cargo.toml", "w").write(
    '[package]\nname = "quick-start"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
    '[workspace]\n\n' + deps)
open(crate + "/src/main.rs", "w").write(rust.group(1))
EOF

echo "== the README's quick start, as a new crate"
cat "$WORK/crate/Cargo.toml"
cp "$ROOT/Cargo.lock" "$WORK/crate/Cargo.lock"
(cd "$WORK/crate" && CARGO_TARGET_DIR="$WORK/target" cargo check --offline --quiet)
echo "compiles"

echo "== its dependency tree holds no CLI crate"
tree=$(cd "$WORK/crate" && cargo tree --offline -e normal --prefix none --format '{p}')
echo "$(printf '%s\n' "$tree" | sort -u | wc -l) crates"
if printf '%s\n' "$tree" | grep -E '^(clap|clap_complete|comfy-table|tracing-subscriber) '; then
  echo "a library user with default features gets the CLI's crates" >&2
  exit 1
fi

echo "== rust-version covers every dependency"
cd "$ROOT"
cargo tree --offline -e normal,build --prefix none --format '{p}' --features cli,embedded,prometheus,tls,toml \
  | sed 's/ (.*//' | sort -u >"$WORK/packages"
cargo metadata --offline --format-version 1 | python3 -c '
import json, sys
packages = set(tuple(line.split(" v")) for line in open(sys.argv[1]).read().split("\n") if " v" in line)
meta = json.load(sys.stdin)
ours = next(p for p in meta["packages"] if p["name"] == "rocketmq-actor")["rust_version"]
key = lambda v: (tuple(int(x) for x in v.split(".")) + (0, 0))[:3]
newer = [(p["name"], p["version"], p["rust_version"]) for p in meta["packages"]
         if (p["name"], p["version"]) in packages and p.get("rust_version")
         and key(p["rust_version"]) > key(ours)]
needed = max((p.get("rust_version") or "0" for p in meta["packages"]
              if (p["name"], p["version"]) in packages), key=key)
print(f"rust-version {ours}; the newest a dependency asks for: {needed}")
if newer:
    sys.exit(f"dependencies need a newer Rust than rust-version {ours}: {newer}")
' "$WORK/packages"
