#!/usr/bin/env python3
"""Where a consumer phase's client instructions go, next to the raw pull loop's.

Reads callgrind profile parts of `consume_bench` (one part per client start, as
`scripts/bench.sh` takes them: setup, producing, raw, then each phase) and sums each
function's own instructions ("self" cost: what is inlined into a function counts as its
own) into parts of the runtime: actix's contexts and mailboxes, tokio and futures,
allocation, the queue actor, the listener loop, the consumer core, the wire layer...
It prints one JSON line: for the raw loop and each phase, instructions per message by part.

    python3 scripts/callgrind_parts.py --messages 100000 --label after \
        raw=phase.3 push=phase.4 push32=phase.5

`scripts/bench_report.py` turns the line into the table "where the instructions over the
raw loop go" of BENCHMARKS.md.
"""

import argparse
import collections
import json
import re
import sys

# (part, pattern matched against the function's owner): the first match wins.
PARTS = [
    ("allocation", re.compile(
        r"^(malloc|free|cfree|realloc|_int_(malloc|free|realloc)|unlink_chunk|malloc_consolidate"
        r"|tcache|__rustc::__r(ust|dl)_(alloc|dealloc|realloc)|alloc::raw_vec)")),
    ("memory copies", re.compile(r"^__mem(cpy|move|set|cmp)")),
    ("clock reads", re.compile(r"(clock_gettime|Timespec|std::time::(Instant|SystemTime))")),
    ("tracing", re.compile(r"^tracing")),
    ("actix (contexts, mailboxes, spawned futures)", re.compile(r"^actix")),
    ("tokio, futures (tasks, timers, channels)", re.compile(r"^(tokio|futures)")),
    ("listener loop", re.compile(r"^rocketmq_actor::actors::listener")),
    ("queue actor", re.compile(r"^rocketmq_actor::actors::queue")),
    ("consumer core (queue core, pull cache, offsets)", re.compile(r"^rocketmq_actor::consumer")),
    ("wire (codec, headers, message decoding)",
     re.compile(r"^rocketmq_actor::(protocol|message|rpc)")),
    ("client, connection, puller",
     re.compile(r"^rocketmq_actor::(actors::(client|connection|puller)|remoting|route)")),
    ("the bench's listener", re.compile(r"^consume_bench")),
]
OTHER = "other"


def owner(name):
    """The type or module a function belongs to: `<T as Trait>::f` is T's, `drop_in_place<T>`
    is T's."""
    while True:
        if name.startswith("<"):
            depth, end = 0, len(name)
            for at, char in enumerate(name):
                if char == "<":
                    depth += 1
                elif char == ">":
                    depth -= 1
                elif depth == 1 and name.startswith(" as ", at):
                    end = at
                    break
            name = name[1:end]
            continue
        drop = re.match(r"core::ptr::drop_in_place<(.*)>$", name)
        if drop:
            name = drop.group(1)
            continue
        return name


def part_of(name):
    who = owner(name)
    for part, pattern in PARTS:
        if pattern.search(who):
            return part
    return OTHER


def self_costs(path):
    """Each function's own instructions in a callgrind output file."""
    names, cost = {}, collections.Counter()
    current, after_calls = None, False
    with open(path) as handle:
        for line in handle:
            if line.startswith("fn="):
                match = re.match(r"fn=\((\d+)\)(?: (.*))?", line.strip())
                if match:
                    if match.group(2):
                        names[match.group(1)] = match.group(2)
                    current = names.get(match.group(1))
                else:
                    current = line[3:].strip()
            elif line.startswith("cfn="):
                match = re.match(r"cfn=\((\d+)\) (.*)", line.strip())
                if match:
                    names[match.group(1)] = match.group(2)
            elif line.startswith("calls="):
                # The next cost line is the call's inclusive cost, not this function's own.
                after_calls = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                fields = line.split()
                if len(fields) >= 2 and current:
                    cost[current] += int(fields[1])
    return cost


def parts(path, messages):
    totals = collections.Counter()
    for name, instructions in self_costs(path).items():
        totals[part_of(name)] += instructions
    return {part: round(total / messages, 1) for part, total in totals.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, required=True, help="messages per part")
    parser.add_argument("--label", default="after")
    parser.add_argument("phases", nargs="+", help="NAME=callgrind-part, the raw loop's as raw=")
    args = parser.parse_args()
    result = {}
    for phase in args.phases:
        name, _, path = phase.partition("=")
        if not path:
            parser.error(f"{phase!r} is not NAME=FILE")
        result[name] = parts(path, args.messages)
    json.dump({"label": args.label, "count": args.messages, "parts": result}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
