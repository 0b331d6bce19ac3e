#!/bin/sh
# bench/compare.sh: graft against llama.cpp, side by side, on the same GGUF files.
#
# usage: bench/compare.sh MODEL.gguf... [--threads N] [--pairs N] [--reps N] [--prompt N]
#                         [--gen N]
#
# For each model it first checks that llama.cpp loads and runs the file (and says so when it
# does not: graft is then measured alone). Then it runs --pairs pairs (default 10, at least
# 10 for a figure worth quoting) of `graft bench speed --json` and bench/build/llama_speed
# --json in ABBA order (graft then llama.cpp, llama.cpp then graft, ...), so a drift in the
# machine's state hits both alike. Each figure's ratio graft ÷ llama.cpp is taken within
# each pair; the table shows each engine's median over its runs and the median, min and max
# of the per-pair ratios. The headline prefill and decode are graft's engine (the path users
# get); graft_context's are beside them, named as such. The tables go to stdout and to a
# dated file under bench/results/ (or $BENCH_RESULTS_DIR) with the command, the commit and
# the CPU. What is measured and how: bench/README.md.
#
# Needs a graft built in release mode ($GRAFT_BIN, else build/release/graft) and, for
# llama.cpp, sh bench/setup.sh first. Exit status: 1 when graft could not measure a model
# (llama.cpp failing on one is reported, not an error), 2 for a usage error.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
graft=${GRAFT_BIN:-$here/../build/release/graft}
llama=$here/build/llama_speed
results=${BENCH_RESULTS_DIR:-$here/results}
threads=$(getconf _NPROCESSORS_ONLN)
pairs=10
reps=1
sizes=
command_line="bench/compare.sh $*"

usage() { # usage STATUS: the usage line, on stdout for --help (status 0), else stderr
    line="usage: bench/compare.sh MODEL.gguf... [--threads N] [--pairs N] [--reps N] [--prompt N] [--gen N]"
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
        --pairs) pairs=$(number "$1" "${2-}"); shift ;;
        --reps) reps=$(number "$1" "${2-}"); shift ;;
        --prompt | --gen) sizes="$sizes $1 $(number "$1" "${2-}")"; shift ;;
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
    echo "compare: no $llama (run: sh bench/setup.sh); graft is measured alone" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# llama_can_run MODEL: 0 when llama.cpp loads MODEL and decodes a few tokens.
llama_can_run() {
    [ -x "$llama" ] || return 1
    if "$llama" -m "$1" --threads "$threads" --check >"$tmp/check.out" 2>"$tmp/check.err"; then
        return 0
    fi
    echo "compare: llama.cpp cannot run $1; its messages:" >&2
    sed 's/^/    /' "$tmp/check.err" | tail -n 15 >&2
    return 1
}

# run_engine NAME MODEL COMMAND...: the JSON of pair $pair in $tmp/NAME.$pair.json.
run_engine() {
    echo "compare: $2: $1, pair $pair of $pairs" >&2
    out=$tmp/$1.$pair.json err=$tmp/$1.err
    shift 2
    if ! "$@" >"$out" 2>"$err"; then
        echo "compare: this run failed:" >&2
        sed 's/^/    /' "$err" | tail -n 15 >&2
        return 1
    fi
}

run_graft() { # run_graft MODEL
    # shellcheck disable=SC2086 # $sizes is a list of options
    run_engine graft "$1" "$graft" bench speed -m "$1" --threads "$threads" --reps "$reps" \
        $sizes --json
}

run_llama() { # run_llama MODEL
    # shellcheck disable=SC2086
    run_engine llama "$1" "$llama" -m "$1" --threads "$threads" --reps "$reps" $sizes --json
}

# table MODEL LLAMA_RAN: the markdown table from the pairs' JSON files.
table() {
    python3 "$here/compare_table.py" "$tmp" "$pairs" "$1" "$2"
}

load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
echo "compare: $threads threads, $pairs pairs of $reps reps; load average before: $load" >&2
: >"$tmp/tables.md"
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
    pair=1
    while [ "$pair" -le "$pairs" ] && [ "$ok" = 1 ]; do
        # ABBA: odd pairs run graft first, even pairs llama.cpp first.
        if [ $((pair % 2)) = 0 ] && [ "$llama_ran" = 1 ]; then
            run_llama "$model" || llama_ran=0
        fi
        run_graft "$model" || ok=0
        if [ $((pair % 2)) = 1 ] && [ "$ok" = 1 ] && [ "$llama_ran" = 1 ]; then
            run_llama "$model" || llama_ran=0
        fi
        pair=$((pair + 1))
    done
    if [ "$ok" = 1 ]; then
        table "$model" "$llama_ran" >>"$tmp/tables.md"
    else
        : >"$tmp/failed"
    fi
done
if [ -s "$tmp/tables.md" ]; then
    cat "$tmp/tables.md"
    mkdir -p "$results"
    commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if ! git -C "$here" diff --quiet HEAD 2>/dev/null; then
        commit="$commit (with uncommitted changes)"
    fi
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    out=$results/$(date -u +%Y-%m-%d-%H%M%S)-compare.md
    {
        echo "# bench/compare.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "- command: \`$command_line\`"
        echo "- commit: $commit"
        flags=$(grep -o -w -e avx2 -e avx512f -e avx512_vnni -e avx512vnni /proc/cpuinfo | sort -u | tr "\n" " ")
        echo "- CPU: ${cpu:-unknown}, $(getconf _NPROCESSORS_ONLN) online (${flags% }); load average before: $load"
        echo
        cat "$tmp/tables.md"
    } >"$out"
    echo "compare: saved in $out" >&2
fi
if [ -e "$tmp/failed" ]; then
    exit 1
fi
