#!/bin/sh
# The runner images' user, home and caches (both runner targets of the Dockerfile run this one file).
# The home and the caches in it belong to the user and to group 0, group-writable (setgid folders keep new files
# in group 0): the image's user writes them, and so does any UID that runs with GID 0.
set -eu
uid="$1"
gid="$2"
groupadd --gid "$gid" batchmark
useradd --uid "$uid" --gid "$gid" --no-create-home --home-dir /home/batchmark --shell /usr/sbin/nologin batchmark
mkdir -p /home/batchmark/.cache/huggingface /home/batchmark/.cache/vllm /home/batchmark/.config/vllm
chown -R "$uid:0" /home/batchmark
chmod -R u=rwX,g=rwX,o= /home/batchmark
find /home/batchmark -type d -exec chmod g+s {} +
