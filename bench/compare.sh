#!/bin/sh
# bench/compare.sh: graft against llama.cpp, side by side, on the same GGUF files.
#
# usage: bench/compare.sh MODEL.gguf... [--threads N] [--runs N] [--reps N]
#
# For each model it first checks that llama.cpp loads and runs the file (and says so when
# it does not: graft is then measured alone). Then it runs `graft bench speed --json` and
# bench/build/llama_speed --json alternately, graft, llama.cpp, graft, llama.cpp, ...,
# --runs times each (default 3), so a drift in the machine's state hits both alike. Each
# run measures every figure --reps times (default 1) and reports the median; the table
# shows, per figure, the median over the runs. Both engines get the same thread count
# (default: one per online CPU). Progress goes to stderr; stdout is one markdown table per
# model: metric | graft | llama.cpp | graft ÷ llama.cpp, with each engine's decode as a
# percentage of its decode roofline: memory bandwidth ÷ the bytes a decoded token reads
# (weights plus the F16 KV of its context, as graft bench speed counts them), from the
# bandwidth sampled during the decode and from the one sampled around it, and bandwidth
# (around) ÷ weight bytes alone; each run's decode is set against the rooflines of its own
# samples, and the median of those percentages shown.
#
# Needs sh bench/setup.sh first, and a graft built in release mode ($GRAFT_BIN, else
# build/release/graft). Timings are only as quiet as the machine: see bench/README.md.
# Exit status: 1 when graft could not measure a model (llama.cpp failing on one is reported,
# not an error), 2 for a usage error.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
graft=${GRAFT_BIN:-$here/../build/release/graft}
llama=$here/build/llama_speed
threads=$(getconf _NPROCESSORS_ONLN)
runs=3
reps=1

usage() { # usage STATUS: the usage line, on stdout for --help (status 0), else stderr
    line="usage: bench/compare.sh MODEL.gguf... [--threads N] [--runs N] [--reps N]"
    if [ "$1" = 0 ]; then echo "$line"; else echo "$line" >&2; fi
    exit "$1"
}

number() { # number OPTION VALUE: VALUE when it is a positive integer, else usage
    case $2 in
        '' | *[!0-9]* | 0*) echo "compare: $1 needs a positive integer, not '$2'" >&2; usage 2 ;;
    esac
    echo "$2"
}

models=
while [ $# -gt 0 ]; do
    case $1 in
        --threads) threads=$(number "$1" "${2-}"); shift ;;
        --runs) runs=$(number "$1" "${2-}"); shift ;;
        --reps) reps=$(number "$1" "${2-}"); shift ;;
        -h | --help) usage 0 ;;
        -*) echo "compare: unknown option '$1'" >&2; usage 2 ;;
        *) models="$models
$1" ;;
    esac
    shift
done
[ -n "$models" ] || usage 2
if [ ! -x "$graft" ]; then
    echo "compare: no graft at $graft (make release, or set GRAFT_BIN)" >&2
    exit 1
fi
if [ ! -x "$llama" ]; then
    echo "compare: no $llama (run: sh bench/setup.sh)" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# llama_can_run MODEL: 0 when llama.cpp loads MODEL and decodes a few tokens.
llama_can_run() {
    if "$llama" -m "$1" --threads "$threads" --check >"$tmp/check.out" 2>"$tmp/check.err"; then
        return 0
    fi
    echo "compare: llama.cpp cannot run $1; its messages:" >&2
    sed 's/^/    /' "$tmp/check.err" | tail -n 15 >&2
    return 1
}

# run_engine NAME MODEL COMMAND...: the JSON of run $run in $tmp/NAME.$run.json.
run_engine() {
    echo "compare: $2: $1, run $run of $runs" >&2
    out=$tmp/$1.$run.json err=$tmp/$1.err
    shift 2
    if ! "$@" >"$out" 2>"$err"; then
        echo "compare: this run failed:" >&2
        sed 's/^/    /' "$err" | tail -n 15 >&2
        return 1
    fi
}

# table MODEL LLAMA_RAN: the markdown table from the runs' JSON files.
table() {
    python3 - "$tmp" "$runs" "$1" "$2" <<'EOF'
import json, statistics, sys

tmp, runs, model, llama_ran = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"

def load(engine):
    return [json.load(open(f"{tmp}/{engine}.{r}.json")) for r in range(1, runs + 1)]

def med(rows, key, sub=None):
    return statistics.median(r[key][sub] if sub else r[key] for r in rows)

graft = load("graft")
llama = load("llama") if llama_ran else None
g0 = graft[0]
# llama_speed reports the weights-only roofline; both engines read the same F16 KV, so its
# roofline with the KV reads uses graft's count of them.
for r in llama or []:
    r["decode_roofline_weights_tps"] = r["decode_roofline_tps"]
    r["decode_roofline_tps"] = (r["bandwidth_gbs"] * 1e9 /
                                (r["weight_bytes"] + g0["kv_bytes_per_token"]))
    r["decode_roofline_during_tps"] = (r["bandwidth_during_gbs"] * 1e9 /
                                       (r["weight_bytes"] + g0["kv_bytes_per_token"]))

figures = [
    (f"prefill, tok/s ({g0['prompt_tokens']} tokens, one batch)", "prefill_tps", None),
    (f"decode, tok/s ({g0['gen_tokens']} after {g0['prompt_tokens']})", "decode_tps", None),
]
for n in g0["aggregate_tps"]:
    figures.append((f"aggregate decode, tok/s, {n} sequence{'s' if n != '1' else ''}",
                    "aggregate_tps", n))
figures += [
    ("memory read bandwidth during the decode, GB/s", "bandwidth_during_gbs", None),
    ("memory read bandwidth around the decode, GB/s", "bandwidth_gbs", None),
    ("decode roofline, tok/s (bandwidth during ÷ (weight + KV bytes))",
     "decode_roofline_during_tps", None),
    ("decode roofline, tok/s (bandwidth around ÷ (weight + KV bytes))", "decode_roofline_tps",
     None),
    ("decode roofline, tok/s (bandwidth around ÷ weight bytes)", "decode_roofline_weights_tps",
     None),
]

def cell(v):
    return f"{v:.2f}" if v is not None else "n/a"

print(f"### {model}\n")
print(f"{g0['arch']}, {g0['weight_bytes'] / 2**20:.2f} MiB of weights; "
      f"{g0['threads']} thread{'s' if g0['threads'] > 1 else ''}; "
      f"graft {g0['kernels']} kernels, llama.cpp {llama[0]['kernels'] if llama else 'n/a'}; "
      f"median of {runs} alternated run{'s' if runs > 1 else ''} "
      f"of {g0['reps']} rep{'s' if g0['reps'] > 1 else ''}\n")
if not llama:
    print("No llama.cpp figures: it did not run this file (its messages went to stderr).\n")
elif llama[0]["weight_bytes"] != g0["weight_bytes"]:
    print(f"Note: llama.cpp counts {llama[0]['weight_bytes']} weight bytes, "
          f"graft {g0['weight_bytes']}.\n")
print("| metric | graft | llama.cpp | graft ÷ llama.cpp |")
print("|---|---:|---:|---:|")
for label, key, sub in figures:
    g = med(graft, key, sub)
    l = med(llama, key, sub) if llama else None
    ratio = f"{g / l:.2f}" if l else "n/a"
    print(f"| {label} | {cell(g)} | {cell(l)} | {ratio} |")

def pct(rows, key):  # each run's decode against that run's roofline `key`
    return 100 * statistics.median(r["decode_tps"] / r[key] for r in rows)

for what, key in (("bandwidth during, weight + KV bytes", "decode_roofline_during_tps"),
                  ("bandwidth around, weight + KV bytes", "decode_roofline_tps"),
                  ("bandwidth around, weight bytes only", "decode_roofline_weights_tps")):
    print(f"| decode, % of roofline ({what}) | {pct(graft, key):.1f}% | "
          f"{f'{pct(llama, key):.1f}%' if llama else 'n/a'} | |")
print()
EOF
}

load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
echo "compare: $threads threads, $runs runs of $reps reps; load average before: $load" >&2
echo "$models" | while IFS= read -r model; do
    [ -n "$model" ] || continue
    if [ ! -r "$model" ]; then
        echo "compare: cannot read $model" >&2
        : >"$tmp/failed"
        continue
    fi
    llama_ran=0
    if llama_can_run "$model"; then
        llama_ran=1
    fi
    ok=1
    run=1
    while [ "$run" -le "$runs" ] && [ "$ok" = 1 ]; do
        run_engine graft "$model" "$graft" bench speed -m "$model" \
            --threads "$threads" --reps "$reps" --json || ok=0
        if [ "$ok" = 1 ] && [ "$llama_ran" = 1 ]; then
            run_engine llama "$model" "$llama" -m "$model" \
                --threads "$threads" --reps "$reps" --json || llama_ran=0
        fi
        run=$((run + 1))
    done
    if [ "$ok" = 1 ]; then
        table "$model" "$llama_ran"
    else
        : >"$tmp/failed"
    fi
done
if [ -e "$tmp/failed" ]; then
    exit 1
fi
