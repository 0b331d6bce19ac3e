"""compare_table.py: the markdown table of one model for bench/compare.sh.

usage: compare_table.py TMP PAIRS MODEL LLAMA_RAN

TMP holds graft.<i>.json and (when LLAMA_RAN is 1) llama.<i>.json for i = 1..PAIRS, the
JSON of `graft bench speed` and llama_speed (bench/README.md lists the fields). Each row
shows each engine's median over its runs and the median, min and max over the pairs of the
ratio graft / llama.cpp within the pair (none for the percentages of the rooflines).
"""
import json
import statistics
import sys


def load(tmp, engine, pairs):
    return [json.load(open(f"{tmp}/{engine}.{i}.json")) for i in range(1, pairs + 1)]


def value(run, key):
    return run[key[0]][key[1]] if isinstance(key, tuple) else run[key]


def add_derived(graft, llama):
    # llama_speed does not count the KV a decoded token reads as graft does; both engines
    # read the same F16 KV, so its rooflines with the KV take graft's count from its pair.
    for g, l in zip(graft, llama):
        all_bytes = l["weight_bytes"] + g["kv_bytes_per_token"]
        l["kv_bytes_per_token"] = g["kv_bytes_per_token"]
        l["decode_roofline_tps"] = l["bandwidth_gbs"] * 1e9 / all_bytes
        l["decode_roofline_during_tps"] = l["bandwidth_during_gbs"] * 1e9 / all_bytes
    for r in graft + llama:
        for what in ("during_", "", "weights_"):
            roofline = r[f"decode_roofline_{what}tps"]
            r[f"pct_{what}"] = 100 * r["decode_tps"] / roofline if roofline else 0


def figures(g0):
    """(label, graft's key, llama.cpp's key) of each row."""
    rows = [
        (f"prefill, tok/s ({g0['prompt_tokens']} tokens, one batch), engine", "prefill_tps",
         "prefill_tps"),
        ("prefill, tok/s, graft_context", "context_prefill_tps", "prefill_tps"),
        (f"decode, tok/s ({g0['gen_tokens']} after {g0['prompt_tokens']}), engine",
         "decode_tps", "decode_tps"),
        ("decode, tok/s, graft_context", "context_decode_tps", "decode_tps"),
    ]
    for n in g0["aggregate_tps"]:
        rows.append((f"aggregate decode, tok/s, {n} sequence{'s' if n != '1' else ''}",
                     ("aggregate_tps", n), ("aggregate_tps", n)))
    for label, key in (
            ("memory read bandwidth during the decode, GB/s", "bandwidth_during_gbs"),
            ("memory read bandwidth around the decode, GB/s", "bandwidth_gbs"),
            ("decode roofline, tok/s (bandwidth during ÷ (weight + KV bytes))",
             "decode_roofline_during_tps"),
            ("decode roofline, tok/s (bandwidth around ÷ (weight + KV bytes))",
             "decode_roofline_tps"),
            ("decode roofline, tok/s (bandwidth around ÷ weight bytes)",
             "decode_roofline_weights_tps"),
            ("decode, % of roofline (bandwidth during, weight + KV bytes)", "pct_during_"),
            ("decode, % of roofline (bandwidth around, weight + KV bytes)", "pct_"),
            ("decode, % of roofline (bandwidth around, weight bytes only)", "pct_weights_")):
        rows.append((label, key, key))
    return rows


def main():
    tmp, pairs, model, llama_ran = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
    graft = load(tmp, "graft", pairs)
    llama = load(tmp, "llama", pairs) if llama_ran else []
    add_derived(graft, llama)
    g0 = graft[0]
    print(f"### {model}\n")
    print(f"{g0['arch']}, {g0['weight_bytes'] / 2**20:.2f} MiB of weights; "
          f"{g0['threads']} thread{'s' if g0['threads'] > 1 else ''}; "
          f"graft {g0['kernels']} kernels, llama.cpp {llama[0]['kernels'] if llama else 'n/a'}; "
          f"{pairs} pair{'s' if pairs > 1 else ''} in ABBA order, "
          f"{g0['reps']} rep{'s' if g0['reps'] > 1 else ''} a run\n")
    if not llama:
        print("No llama.cpp figures: it did not run (its messages went to stderr).\n")
    elif llama[0]["weight_bytes"] != g0["weight_bytes"]:
        print(f"Note: llama.cpp counts {llama[0]['weight_bytes']} weight bytes, "
              f"graft {g0['weight_bytes']}.\n")
    print("| metric | graft | llama.cpp | graft ÷ llama.cpp (median of pairs) | min | max |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, gkey, lkey in figures(g0):
        cells = [f"{statistics.median(value(r, gkey) for r in graft):.2f}"]
        if llama:
            cells.append(f"{statistics.median(value(r, lkey) for r in llama):.2f}")
            ratios = [] if str(gkey).startswith("pct_") else [
                value(a, gkey) / value(b, lkey) for a, b in zip(graft, llama) if value(b, lkey)]
            cells += ([f"{statistics.median(ratios):.3f}", f"{min(ratios):.3f}",
                       f"{max(ratios):.3f}"] if ratios else ["n/a"] * 3)
        else:
            cells += ["n/a"] * 4
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
