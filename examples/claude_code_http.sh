#!/bin/sh
# Adds a pybox served over Streamable HTTP to Claude Code. Start the server first:
#   PYBOX_AUTH_TOKEN=... pybox serve --transport http --addr 127.0.0.1:8765
claude mcp add --scope user --transport http pybox-http http://127.0.0.1:8765/mcp --header "Authorization: Bearer ${PYBOX_AUTH_TOKEN}"
