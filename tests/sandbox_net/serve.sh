#!/bin/sh
# serve NAME: answer HTTP on ports 80, 8080 and 22 (IPv4 and IPv6) with "NAME:PORT".
set -e
mkdir -p /srv
for port in 80 8080 22; do
    mkdir -p "/srv/$port"
    echo "$1:$port" > "/srv/$port/index.html"
    python3 -m http.server --bind :: --directory "/srv/$port" "$port" &
done
wait
