#!/usr/bin/env bash
# README "run" command: installs what is needed, builds warden, starts `warden serve` on the
# default model (127.0.0.1, a free port), sends one OpenAI chat request with curl, prints the
# reply and stops the server (SIGTERM drains it). Bounded: gives up after WARDEN_RUN_TIMEOUT s.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/build.sh" "$root/build" -DWARDEN_TESTS=OFF
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
limit="${WARDEN_RUN_TIMEOUT:-300}"
log="$(mktemp)"
"$root/build/warden" serve -m "$model" --host 127.0.0.1 --port 0 "$@" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 $((limit * 5))); do
  port="$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://')" || true
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.2
done
[ -n "$port" ] || { echo "run.sh: server did not start" >&2; cat "$log" >&2; exit 1; }
echo "server: $(head -1 "$log")"
body='{"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "temperature": 0, "max_tokens": 48,
       "messages": [{"role": "user", "content": "'"${WARDEN_PROMPT:-What are the three primary colors?}"'"}]}'
echo "request: POST http://127.0.0.1:$port/v1/chat/completions"
curl -sS --max-time "$limit" "http://127.0.0.1:$port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$body"
echo
