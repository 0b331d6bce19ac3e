#!/bin/sh
# bench/replay.sh: the agent-replay benchmark, every mode of graft serve and llama-server on
# one trace, in one session, one after another; the report goes to stdout and to a dated
# file under bench/results/ with the command, commit and CPU:
# DATE-replay-SHAPE.md, or DATE-replay-SHAPE-LABEL.md with --label (so that a second run the
# same day, another kernel set say, does not overwrite the first).
#
#   bench/replay.sh -m MODEL [--shape agentic|chat|shared] [--sessions N] [--calls N] [--gap-ms N]
#                   [--threads N] [--ctx N] [--slots N] [--max-output N]
#                   [--llama-server PATH] [--modes "off cache active wait"] [--label NAME]
#
# Modes of graft serve: off (no prefix cache, no active reuse), cache (prefix cache only),
# active (cache + taking running requests' prompts, no waiting), wait (cache + active +
# waiting for a prefilling donor: the defaults). llama-server runs with its prompt cache
# (cache_prompt, --cache-ram) and --slots parallel slots of --ctx positions each. Needs
# build/release (graft, bench_replay); token ids are drawn inside the Qwen vocabulary. With
# gnuplot (Debian's gnuplot-nox) the TTFT CDF of every run goes to a PNG beside the report.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=${GRAFT_BIN:-$root/build/release/graft}
replay=$root/build/release/bench_replay
model='' shape=agentic sessions=0 calls=0 gap=0 threads=2 ctx=8192 slots=4 max_output=0 llama=''
label=''
all_modes="off cache active wait"
modes=$all_modes
while [ $# -gt 0 ]; do
    case $1 in
    -m|--model) model=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --gap-ms) gap=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --max-output) max_output=$2; shift 2 ;;
    --llama-server) llama=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    *) echo "replay.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$model" ] || { echo "replay.sh: -m MODEL is required" >&2; exit 2; }
case $label in
*[!A-Za-z0-9_-]*) echo "replay.sh: --label takes letters, digits, '-' and '_': $label" >&2; exit 2 ;;
esac
[ -x "$replay" ] || { echo "replay.sh: build/release/bench_replay is missing (make release)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trace=$work/trace.jsonl
"$replay" generate --shape "$shape" --sessions "$sessions" --calls "$calls" --gap-ms "$gap" \
    -o "$trace"

# Waits for "listening on http://127.0.0.1:PORT" in the log $1 of graft serve's process $2;
# prints the port. Fails as soon as the process has exited (a bad option, say): it is then a
# zombie, or gone, since this shell reaps it only later.
graft_port() {
    for _ in $(seq 1 6000); do
        p=$(sed -n 's|^graft: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        case $(sed -n 's/^State:[[:space:]]*//p' "/proc/$2/status" 2>/dev/null) in
        '' | Z*) return 1 ;;
        esac
        sleep 0.05
    done
    return 1
}

# Replays the trace against the server of process $1 on port $2; the run is labelled $3 and
# saved as $4. The server is stopped afterwards.
replay_against() {
    "$replay" run --trace "$trace" --url "http://127.0.0.1:$2" --label "$3" \
        --max-output "$max_output" -o "$4" || true
    kill -TERM "$1"
    wait "$1" || true
    results="$results $4"
}

results=
for mode in $modes; do
    case $mode in
    off) flags="--cache-entries 0 --active-reuse-min-tokens 0" ;;
    cache) flags="--active-reuse-min-tokens 0" ;;
    active) flags="--active-reuse-wait-ms 0" ;;
    wait) flags="" ;;
    *) echo "replay.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
    log=$work/serve-$mode.log
    # shellcheck disable=SC2086
    "$bin" serve -m "$model" --port 0 --threads "$threads" --ctx "$ctx" --max-sessions "$slots" \
        $flags 2>"$log" &
    pid=$!
    port=$(graft_port "$log" "$pid") || { cat "$log" >&2; kill "$pid" 2>/dev/null; exit 1; }
    echo "replay.sh: graft serve ($mode) on port $port" >&2
    replay_against "$pid" "$port" "graft $mode" "$work/$mode.json"
done

if [ -n "$llama" ]; then
    port=$((20000 + $$ % 20000))
    "$llama" -m "$model" --port "$port" -t "$threads" -c $((ctx * slots)) -np "$slots" \
        --cache-ram 8192 >"$work/llama.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "replay.sh: llama-server on port $port" >&2
    replay_against "$pid" "$port" "llama-server" "$work/llama.json"
fi

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
out=$root/bench/results/$(date +%Y-%m-%d)-replay-$shape${label:+-$label}.md
modes_arg=
if [ "$modes" != "$all_modes" ]; then modes_arg=" --modes \"$modes\""; fi
{
    echo "# Agent replay: $shape trace"
    echo
    echo "Command: \`${GRAFT_KERNELS:+GRAFT_KERNELS=$GRAFT_KERNELS }bench/replay.sh -m $(basename "$model") --shape $shape --sessions $sessions --calls $calls --gap-ms $gap --threads $threads --ctx $ctx --slots $slots --max-output $max_output${llama:+ --llama-server llama-server}$modes_arg${label:+ --label $label}\`"
    echo "Commit $commit; CPU: $cpu, $(nproc) online; $(date -u +%Y-%m-%dT%H:%MZ)."
    echo
    # shellcheck disable=SC2086
    "$replay" report --trace "$trace" --cdf "$work/cdf" $results
    if command -v gnuplot >/dev/null; then
        echo
        echo "![TTFT CDF]($(basename "${out%.md}")-ttft.png)"
    fi
} | tee "$out"
echo "replay.sh: wrote $out" >&2
# The TTFT CDF of every run in one PNG beside the report (gnuplot, Debian's gnuplot-nox).
if command -v gnuplot >/dev/null; then
    plots=
    for f in "$work"/cdf-*.dat; do
        title=$(sed -n '1s/^# //p' "$f")
        plots="$plots${plots:+, }'$f' using 1:2 with steps title '$title'"
    done
    gnuplot -e "set terminal png size 900,540; set output '${out%.md}-ttft.png';
        set logscale x; set xlabel 'time to first token (ms)'; set ylabel 'fraction of requests';
        set key bottom right; set title 'TTFT CDF: $shape trace'; plot $plots"
    echo "replay.sh: wrote ${out%.md}-ttft.png" >&2
fi
