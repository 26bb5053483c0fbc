#!/bin/sh
# One HTTP/1.1 request on stdin, one response on stdout (run per connection by `nc -ll -e`); Connection: close.
exec 2>>/proc/1/fd/2
CR="$(printf '\r')"
read -r METHOD TARGET PROTO || exit 0
PROTO="${PROTO%"$CR"}"
URLPATH="${TARGET%%\?*}"
LEN=0
while read -r LINE; do
  LINE="${LINE%"$CR"}"
  [ -z "$LINE" ] && break
  case "$LINE" in
    [Cc][Oo][Nn][Tt][Ee][Nn][Tt]-[Ll][Ee][Nn][Gg][Tt][Hh]:*) LEN="${LINE#*:}"; LEN="${LEN# }" ;;
  esac
done
BODY=""
if [ "$LEN" -gt 0 ] 2>/dev/null; then BODY="$(head -c "$LEN")"; fi
echo "standin: $METHOD $TARGET" >>/proc/1/fd/1

send() { # status content-type file
  printf 'HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %s\r\nConnection: close\r\n\r\n' "$1" "$2" "$(wc -c <"$3")"
  [ "$METHOD" = HEAD ] || cat "$3"
  exit 0
}
empty() { # status
  printf 'HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n' "$1"
  exit 0
}
count() { N="$(cat /tmp/standin/requests)"; echo $((N + 1)) >/tmp/standin/requests; }

case "$METHOD $URLPATH" in
  "GET /health"|"GET /ping"|"GET /"|"HEAD /health") empty "200 OK" ;;
  "GET /info") send "200 OK" application/json /tmp/standin/info.json ;;
  "GET /v1/models") send "200 OK" application/json /tmp/standin/models.json ;;
  "GET /metrics")
    N="$(cat /tmp/standin/requests)"
    printf '# TYPE tgi_request_count counter\ntgi_request_count %s\n# TYPE tgi_request_success counter\ntgi_request_success %s\n# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 0\n' "$N" "$N" >/tmp/standin/metrics.$$
    printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %s\r\nConnection: close\r\n\r\n' "$(wc -c </tmp/standin/metrics.$$)"
    cat /tmp/standin/metrics.$$; rm -f /tmp/standin/metrics.$$; exit 0 ;;
  "POST /v1/chat/completions")
    count
    case "$BODY" in
      *'"stream":true'*|*'"stream": true'*)
        printf 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n'
        while IFS= read -r CHUNK; do printf 'data: %s\n\n' "$CHUNK"; done </www/chat_stream.jsonl
        printf 'data: [DONE]\n\n'
        exit 0 ;;
      *) send "200 OK" application/json /www/chat.json ;;
    esac ;;
  GET*|POST*|HEAD*) empty "404 Not Found" ;;
  *) empty "405 Method Not Allowed" ;;
esac
