#!/bin/sh
# deploy/image-setup.sh DEB_DIR: the one RUN step of deploy/Dockerfile's runtime image, kept
# in a script so that the test suite runs exactly these steps in a fresh Debian 12 minbase
# root (tests/packaging/fresh_root.sh image): this project's machines have no Docker engine.
# Everything installed is a Debian package: the project's two .debs and their dependencies.
set -eu
debs=$1
export DEBIAN_FRONTEND=noninteractive
# Fixed ids, which Kubernetes' fsGroup (deploy/kubernetes/collector.yaml) names; the
# collector package's postinst keeps an existing user.
groupadd --system --gid 999 pyagent-collector
useradd --system --uid 999 --gid 999 --home-dir /var/lib/pyagent-collector --no-create-home \
  --shell /usr/sbin/nologin --comment "pyagent collector" pyagent-collector
apt-get update -qq
# python3: the health check, and compose's demo app; libcurl4: uploads from that app.
apt-get install -y -qq --no-install-recommends "$debs"/pyagent_*.deb "$debs"/pyagent-collector_*.deb \
  libcurl4 ca-certificates python3 >/dev/null
rm -rf /var/lib/apt/lists/* "$debs"
