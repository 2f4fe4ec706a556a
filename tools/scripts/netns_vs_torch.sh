#!/usr/bin/env bash
# ddpkit's DDP step against PyTorch's across two test hosts (docs/performance.md, "Across hosts"):
# netns_hosts.sh brings up 2 hosts with tbf at RATE both ways on each link, and bench_vs_torch.py
# --modes hosts runs the two MLPs' DDP step with one gloo rank (one compute thread) per host,
# ddpkit and every PyTorch interleaved, REPEATS times, and `bench allreduce` across the hosts
# before and after (what the link delivered). Hosts go away at the end, also on failure. Needs
# root; run it holding the build lock, nothing else measuring.
#   tools/scripts/netns_vs_torch.sh [RATE]        (default 10gbit)
# Environment: REPEATS (3), WORKLOADS (mlp-large,mlp-small), TORCH_PYTHONS (interpreters with
# PyTorch, space-separated; default Debian's /usr/bin/python3 and /work/venv-torch2/bin/python
# where it exists).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
RATE=${1:-10gbit}
if [ -z "${TORCH_PYTHONS:-}" ]; then
  TORCH_PYTHONS=/usr/bin/python3
  [ -x /work/venv-torch2/bin/python ] && TORCH_PYTHONS+=" /work/venv-torch2/bin/python"
fi
pythons=()
for p in $TORCH_PYTHONS; do pythons+=(--torch-python "$p"); done
echo "# 2 test hosts, tbf $RATE both ways on each link"
exec "$here/netns_hosts.sh" run 2 --rate "$RATE" -- /usr/bin/python3 "$here/bench_vs_torch.py" \
  --modes hosts --workloads "${WORKLOADS:-mlp-large,mlp-small}" --torch-settings "1 thread" \
  --repeats "${REPEATS:-3}" --markdown "${pythons[@]}"
