#!/usr/bin/env bash
# quickstart.sh: set pybox up on this machine and run a sample computation
# through the sandbox. Run as root on a fresh Debian machine with Go.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/prepare.sh
echo "--- a sample computation through the sandbox:" >&2
set +e
bin/pybox exec -c '
import numpy as np, pandas as pd
df = pd.DataFrame({"x": np.arange(1, 11)})
df["square"] = df.x ** 2
print(df.tail(3).to_string(index=False))
print("sum of squares 1..10 =", df.square.sum())
print("47/1283 =", round(47 / 1283 * 100, 3), "%")
'
status=$?
set -e
echo "--- pybox is ready: add {\"command\": \"$(pwd)/bin/pybox\"} to your MCP client (see examples/)" >&2
exit $status
