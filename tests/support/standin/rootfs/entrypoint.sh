#!/bin/sh
# TGI stand-in entrypoint: accepts text-generation-launcher style arguments (--model-id, --hostname, --port, ...),
# writes the /info and /v1/models documents, then serves one shell handler per connection with busybox nc.
# Unknown flags are logged and ignored, like a launcher that does not use them.
MODEL_ID="${MODEL_ID:-bigscience/bloom-560m}"
PORT="${PORT:-80}"
BIND="${HOSTNAME_ARG:-0.0.0.0}"
MAX_INPUT=1024
MAX_TOTAL=2048
while [ $# -gt 0 ]; do
  case "$1" in
    --model-id) MODEL_ID="$2"; shift 2 ;;
    --model-id=*) MODEL_ID="${1#*=}"; shift ;;
    --port) PORT="$2"; shift 2 ;;
    --port=*) PORT="${1#*=}"; shift ;;
    --hostname) BIND="$2"; shift 2 ;;
    --hostname=*) BIND="${1#*=}"; shift ;;
    --max-input-tokens) MAX_INPUT="$2"; shift 2 ;;
    --max-total-tokens) MAX_TOTAL="$2"; shift 2 ;;
    --*=*) echo "standin: ignoring $1"; shift ;;
    --*) if [ $# -gt 1 ] && [ "${2#--}" = "$2" ]; then echo "standin: ignoring $1 $2"; shift 2; else echo "standin: ignoring $1"; shift; fi ;;
    *) echo "standin: ignoring argument $1"; shift ;;
  esac
done
VARIANT="$(cat /etc/standin-variant)"
LABEL="standin-$VARIANT"
mkdir -p /tmp/standin
cat > /tmp/standin/info.json <<JSON
{"model_id":"$MODEL_ID","model_sha":null,"model_pipeline_tag":"text-generation","max_concurrent_requests":128,"max_best_of":2,"max_stop_sequences":4,"max_input_tokens":$MAX_INPUT,"max_total_tokens":$MAX_TOTAL,"validation_workers":2,"max_client_batch_size":4,"router":"text-generation-router","version":"3.3.5","sha":null,"docker_label":"$LABEL"}
JSON
printf '{"object":"list","data":[{"id":"%s","object":"model","created":0,"owned_by":"%s"}]}' "$MODEL_ID" "$MODEL_ID" > /tmp/standin/models.json
echo 0 > /tmp/standin/requests
echo "standin: TGI 3.3.5 stand-in ($LABEL) model_id=$MODEL_ID hostname=$BIND port=$PORT"
# busybox nc cannot bind one address: it listens on every address of the container's own network namespace,
# which is what --hostname 0.0.0.0 asks for (the launcher publishes the port on the host's 127.0.0.1 only).
echo "standin: listening on $BIND:$PORT"
# PID 1 ignores SIGTERM unless it traps it: stop nc and exit on TERM/INT, like the launcher's graceful shutdown.
/bin/nc -ll -p "$PORT" -e /bin/handler.sh &
NC=$!
trap 'echo "standin: shutting down"; kill $NC 2>/dev/null; exit 0' TERM INT
wait $NC
