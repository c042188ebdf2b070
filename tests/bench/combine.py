#!/usr/bin/env python3
"""Combines benchmark runs and the Python peers into the tables BENCHMARKS.md quotes.

    python3 tests/bench/combine.py RUN1.json RUN2.json [--peers PEERS.json]

RUNn.json are written by `cuda-stream-bench --json FILE` (one per full run, two for the target
verdicts), PEERS.json by `peers.py --json FILE`. Prints, in Markdown:

1. the targets over the runs: per row, each run's ratio to the raw call with its spread (min–max)
   and its median over the repetitions that ran the raw side first and over those that ran
   cuda-stream first, and `met` only when every run (at least two) is within the target (rows
   without a target, the diagnostics and the A/A control, are listed with their ratios);
2. one table of ns per operation for every column: raw, cuda-stream and cudarc (from the first
   run), PyTorch, CuPy and cuda.core (from the peers), `n/a` where a column has no equivalent,
   with the reasons and the calls timed below it.

A missing or unreadable file is reported and its columns left empty. Exits 0 unless no run
could be read. Stdlib only.
"""

import json
import sys

PEERS = [("torch", "PyTorch"), ("cupy", "CuPy"), ("cuda.core", "cuda.core")]


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{path}: {e}"


def target_text(t):
    if t is None:
        return "—"
    if t["kind"] == "ratio":
        return f"<= {t['value']:.2f}"
    return f"< {t['value']:.0f} ns"


def within(row):
    """Whether this run's row meets its target (None: no target)."""
    t = row.get("target")
    if t is None:
        return None
    safe = row["safe"]
    if t["kind"] == "ratio":
        return safe["ratio"] is not None and safe["ratio"] <= t["value"]
    return safe["ns"] is not None and safe["ns"] < t["value"]


def run_cell(row):
    """`ratio (min–max; raw first / cuda-stream first)`, the parts the run has."""
    if row is None:
        return "—"
    safe, t = row["safe"], row.get("target")
    if t is not None and t["kind"] == "below_ns":
        return f"{safe['ns']:.1f} ns"
    sp = safe.get("spread") or {}
    parts = []
    if sp.get("min") is not None:
        parts.append(f"{sp['min']:.3f}–{sp['max']:.3f}")
    if safe.get("raw_first") is not None and safe.get("side_first") is not None:
        parts.append(f"{safe['raw_first']:.3f} / {safe['side_first']:.3f}")
    if not parts:
        return f"{safe['ratio']:.3f}"
    return f"{safe['ratio']:.3f} ({'; '.join(parts)})"


def verdict(rows):
    present = [r for r in rows if r is not None]
    if not present or present[0].get("target") is None:
        return "—"
    results = [within(r) for r in present]
    if len(present) < 2:
        return "met in 1 run (2 needed)" if all(results) else "MISSED"
    if len(present) < len(rows):
        return "MISSED (a run lacks this row)"
    return "met" if all(results) else "MISSED"


class Notes:
    """Footnotes: each distinct text once, lettered in order of first use."""

    def __init__(self):
        self.texts = []

    def mark(self, text):
        if text not in self.texts:
            self.texts.append(text)
        i = self.texts.index(text)
        return "[" + (chr(ord("a") + i) if i < 26 else str(i)) + "]"


def cuda_version(v):
    """13000 -> "13.0"."""
    try:
        return f"{int(v) // 1000}.{int(v) % 1000 // 10}"
    except (TypeError, ValueError):
        return str(v)


def ns(x):
    return "—" if x is None else f"{x:.1f}"


def main(argv):
    peers_path = None
    runs_paths = []
    it = iter(argv)
    for a in it:
        if a == "--peers":
            peers_path = next(it, None)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            runs_paths.append(a)
    runs, problems = [], []
    for p in runs_paths:
        doc, err = load(p)
        if err:
            problems.append(err)
        runs.append(doc)
    peers, err = load(peers_path) if peers_path else (None, None)
    if err:
        problems.append(err)
    for p in problems:
        print(f"combine: could not read {p}")
    read = [r for r in runs if r is not None]
    if not read:
        print("combine: no benchmark run could be read")
        return 1

    first = read[0]
    order = [r["id"] for r in first["rows"]]
    for r in read[1:]:
        order += [r2["id"] for r2 in r["rows"] if r2["id"] not in order]
    by_run = [{row["id"]: row for row in r["rows"]} if r else {} for r in runs]
    label = {}
    for r in reversed(read):
        label.update({row["id"]: row["op"] for row in r["rows"]})

    quick = any(r.get("quick") for r in read) or bool(peers and peers.get("quick"))
    machine = first.get("machine", {})
    print(
        f"GPU: {machine.get('gpu', '?')}; driver: CUDA {cuda_version(machine.get('driver_version'))}"
        + (f", kernel module {machine['kernel_module']}" if machine.get("kernel_module") else "")
        + f"; {len(runs)} benchmark run(s)"
        + (" (--quick: smoke test, numbers not meaningful)" if quick else "")
        + "."
    )
    print()
    print(f"Targets over {len(runs)} full runs (met only when every run is within the target):")
    print()
    heads = " | ".join(
        f"run {i + 1}: ratio (min–max; raw first / cuda-stream first)" for i in range(len(runs))
    )
    print(f"| op | target | {heads} | verdict |")
    print("|---|---|" + "---:|" * len(runs) + "---|")
    met = total = 0
    for rid in order:
        rows = [b.get(rid) for b in by_run]
        anyrow = next(r for r in rows if r is not None)
        v = verdict(rows)
        if anyrow.get("target") is not None:
            total += 1
            met += v == "met"
        cells = " | ".join(run_cell(r) for r in rows)
        print(f"| {label[rid]} | {target_text(anyrow.get('target'))} | {cells} | {v} |")
    print()
    print(f"Targets met in every run: {met} of {total}.")

    # Every column, ns per operation.
    notes = Notes()
    peer_results = (peers or {}).get("frameworks", {})
    print()
    print(
        "Every column, ns per operation (raw, cuda-stream, cudarc: run 1, same process; "
        "PyTorch, CuPy, cuda.core: tests/bench/peers.py, one process per framework):"
    )
    print()
    cols = ["raw", "cuda-stream", "cudarc"] + [lbl for _, lbl in PEERS]
    print("| op | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    b1 = by_run[runs.index(first)]
    cudarc_ran = (first.get("cudarc") or {}).get("ran", False)
    peer_ids = []
    for rid in order:
        row = b1.get(rid)
        cells = [ns(row["raw_ns"]) if row else "—", ns(row["safe"]["ns"]) if row else "—"]
        c = row.get("cudarc") if row else None
        if c is None:
            cells.append("—" if cudarc_ran else "not run")
        elif "na" in c:
            cells.append("n/a " + notes.mark(c["na"]))
        else:
            cells.append(ns(c["ns"]))
        for key, lbl in PEERS:
            fw = peer_results.get(key)
            if fw is None:
                cells.append("not run")
                continue
            cell = fw.get("rows", {}).get(rid)
            if cell is None:
                status = fw.get("status", "?")
                cells.append(status if status != "ok" else "—")
            elif "na" in cell:
                cells.append("n/a " + notes.mark(cell["na"]))
            elif "error" in cell:
                cells.append("error " + notes.mark(f"{lbl}: {cell['error']}"))
            else:
                cells.append(ns(cell["ns"]))
                if rid not in peer_ids:
                    peer_ids.append(rid)
        print(f"| {label[rid]} | " + " | ".join(cells) + " |")
    print()
    if not cudarc_ran:
        why = (first.get("cudarc") or {}).get("why", "?")
        print(f"cudarc: not run ({why}).")
    for key, lbl in PEERS:
        fw = peer_results.get(key)
        if fw is None:
            print(f"{lbl}: not run" + ("" if peers else " (no peers file)") + ".")
            continue
        line = f"{lbl}: {fw.get('status', '?')}"
        if fw.get("version"):
            line += f", {lbl} {fw['version']} on {fw.get('gpu', '?')}"
        if fw.get("detail"):
            line += f" ({fw['detail']})"
        if fw.get("loop_floor_ns") is not None:
            line += f"; the Python timing loop alone costs {fw['loop_floor_ns']:.1f} ns per call"
        print(line + ".")
    if notes.texts:
        print()
        for i, text in enumerate(notes.texts):
            print(f"- {notes.mark(text)} {text}")
    if peer_ids:
        print()
        print("What each Python cell times:")
        print()
        for rid in peer_ids:
            calls = []
            for key, lbl in PEERS:
                cell = peer_results.get(key, {}).get("rows", {}).get(rid) or {}
                if "call" in cell:
                    calls.append(f"{lbl} `{cell['call']}`")
            print(f"- {label[rid]}: " + "; ".join(calls))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
