#!/usr/bin/env bash
# Recipe of the converged Debian 12 host image: a fresh Debian 12 container on the test network,
# the lab's researcher account created (as the default and cluster scenarios' prepare do), then
# playbooks/site.yml with tools/images/converged.yml (ROCm from the AMD-layout mirror, PyTorch
# from the wheelhouse, the smoke job run and passed), committed as TAG. Only a host on which the
# whole converge passed is committed. The scenarios that test something other than installation
# start from it (docs/testing.md). Needs the harness's services (tools/test starts them) and
# prepare_lab's PATH. The rocmlab wheel comes as in every run of the role: from the controller
# account's wheel cache, built there only when the project changed (action rocmlab_wheel).
# Usage: converged.sh TAG   (converged_image_tag in tools/lib.sh names it)
set -euo pipefail
tag=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
name=rocmlab-converged-build-$$
work=$(mktemp -d)
cleanup() {
  docker rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag: already built from these inputs, reused"
  exit 0
fi
: "${ROCMLAB_IMAGE_DEBIAN12:?}" "${ROCMLAB_MIRROR_URL:?}" "${ROCMLAB_MIRROR_FINGERPRINT:?}"
: "${ROCMLAB_WHEELHOUSE_URL:?}" "${ROCMLAB_DATASETS_URL:?}"

mkdir -p "$work/reports"

docker run -d --name "$name" --network rocmlab-test --label rocmlab.fixture=converged-build \
  "$ROCMLAB_IMAGE_DEBIAN12" sleep infinity >/dev/null
docker exec "$name" useradd --create-home researcher

ROCMLAB_CONVERGED_REPORTS="$work/reports" ANSIBLE_PIPELINING=True \
  ansible-playbook -i "$name," -c community.docker.docker \
  -e @"$root/tools/images/converged.yml" \
  "$root/playbooks/site.yml"

# The smoke job's report, fetched by the run: passed (the run also stops when the job fails).
python3 - "$work/reports/$name.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report.get("passed") is True, f"{sys.argv[1]}: the smoke job did not pass"
PY

docker stop -t 1 "$name" >/dev/null
docker commit --change 'CMD ["sleep", "infinity"]' \
  --message "rocmlab test image: Debian 12 converged by playbooks/site.yml" \
  "$name" "$tag" >/dev/null
echo "$tag: built"

# Images of this recipe made from other inputs over a week ago, which no container uses: gone (a
# rerun of an older checkout rebuilds its own). `docker rmi` refuses an image still in use.
docker image ls --filter "reference=${tag%%:*}" --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}' |
  while read -r old created _; do
    [ "$old" != "$tag" ] || continue
    if [ "$(date -d "$created" +%s 2>/dev/null || echo 0)" -lt "$(($(date +%s) - 7 * 86400))" ]; then
      docker rmi "$old" >/dev/null 2>&1 && echo "removed $old (over a week old)"
    fi
  done
true
