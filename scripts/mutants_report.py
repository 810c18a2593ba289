"""Per-file table of a cargo-mutants run: scripts/mutants_report.py MUTANTS_OUT_DIR FILE..."""
import os
import sys

KINDS = ["caught", "missed", "timeout", "unviable"]


def read(out_dir, kind):
    path = os.path.join(out_dir, f"{kind}.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def main():
    out_dir, files = sys.argv[1], sys.argv[2:]
    outcomes = {kind: read(out_dir, kind) for kind in KINDS}
    rows = []
    for file in files:
        counts = {k: sum(1 for m in outcomes[k] if m.startswith(file + ":")) for k in KINDS}
        rows.append((file, counts))
    total = {k: sum(c[k] for _, c in rows) for k in KINDS}
    print(f"{'file':40} {'caught':>7} {'missed':>7} {'timeout':>8} {'unviable':>9} {'score':>7}")
    for file, c in rows + [("total", total)]:
        viable = c["caught"] + c["timeout"] + c["missed"]
        score = f"{100 * (c['caught'] + c['timeout']) / viable:.1f}%" if viable else "-"
        print(f"{file:40} {c['caught']:>7} {c['missed']:>7} {c['timeout']:>8} {c['unviable']:>9} {score:>7}")
    if outcomes["missed"]:
        print("\nmissed:")
        for m in outcomes["missed"]:
            if any(m.startswith(f + ":") for f in files):
                print("  " + m)


if __name__ == "__main__":
    main()
