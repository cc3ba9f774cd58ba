#!/bin/sh
# Adds pybox to Claude Code for your user (all projects), over stdio.
# Install the binary first: sudo install -m 755 bin/pybox /usr/local/bin/pybox
claude mcp add --scope user pybox -- /usr/local/bin/pybox
